#!/usr/bin/env python3
"""Print a JSON profile of a CSV file: rows, columns, and per-column statistics.

Usage: summarize.py FILE [--delimiter D] [--top N]
Only the standard library is used, so it runs in any sandbox with Python 3.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from collections import Counter

MAX_DISTINCT = 10_000  # distinct text values tracked per column


def _number(value: str) -> float | None:
    try:
        number = float(value.replace(",", "")) if value.strip() else None
    except ValueError:
        return None
    if number is None or math.isnan(number) or math.isinf(number):
        return None
    return number


def summarize(path: str, delimiter: str | None, top: int) -> dict[str, object]:
    with open(path, newline="", encoding="utf-8-sig") as handle:
        sample = handle.read(65_536)
        handle.seek(0)
        if delimiter is None:
            try:
                delimiter = csv.Sniffer().sniff(sample, delimiters=",;\t|").delimiter
            except csv.Error:
                delimiter = ","
        reader = csv.reader(handle, delimiter=delimiter)
        header = next(reader, None)
        if header is None:
            return {"file": path, "rows": 0, "columns": []}
        stats = [
            {"missing": 0, "numbers": 0, "sum": 0.0, "min": None, "max": None, "values": Counter()}
            for _ in header
        ]
        rows = 0
        for row in reader:
            rows += 1
            for index, column in enumerate(stats):
                value = row[index] if index < len(row) else ""
                if not value.strip():
                    column["missing"] += 1
                    continue
                number = _number(value)
                if number is not None:
                    column["numbers"] += 1
                    column["sum"] += number
                    column["min"] = number if column["min"] is None else min(column["min"], number)
                    column["max"] = number if column["max"] is None else max(column["max"], number)
                values = column["values"]
                if value in values or len(values) < MAX_DISTINCT:
                    values[value] += 1
    columns = []
    for name, column in zip(header, stats, strict=True):
        present = rows - column["missing"]
        numeric = present > 0 and column["numbers"] == present
        entry: dict[str, object] = {
            "name": name,
            "type": "number" if numeric else ("empty" if present == 0 else "text"),
            "missing": column["missing"],
            "missing_ratio": round(column["missing"] / rows, 4) if rows else 0.0,
            "distinct": len(column["values"]),
        }
        if numeric:
            entry.update(
                min=column["min"], max=column["max"], mean=round(column["sum"] / present, 6)
            )
        else:
            entry["top"] = column["values"].most_common(top)
        columns.append(entry)
    return {"file": path, "delimiter": delimiter, "rows": rows, "columns": columns}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("file")
    parser.add_argument("--delimiter", default=None)
    parser.add_argument("--top", type=int, default=5)
    args = parser.parse_args(argv)
    json.dump(summarize(args.file, args.delimiter, args.top), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
