import sys

import requests
from bs4 import BeautifulSoup

resp = requests.get(sys.argv[1], timeout=20, headers={"User-Agent": "research-bot/1.0"})
resp.raise_for_status()
soup = BeautifulSoup(resp.text, "html.parser")
title = soup.title.string if soup.title else ""
body = " ".join(p.get_text(" ", strip=True) for p in soup.find_all("p"))
print(title)
print(body[:5000])
