import csv
import sys

import pandas as pd

src, dst = sys.argv[1], sys.argv[2]
with open(src, newline="", encoding="utf-8", errors="replace") as fh:
    dialect = csv.Sniffer().sniff(fh.read(4096))
df = pd.read_csv(src, sep=dialect.delimiter)
df.columns = [c.strip().lower().replace(" ", "_") for c in df.columns]
df.drop_duplicates().to_csv(dst, index=False)
print(f"{len(df)} rows written to {dst}")
