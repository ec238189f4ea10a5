#!/usr/bin/env python3
"""Sums `ncu --csv --metrics gpu__time_duration.sum` output per kernel name (h200_session's
ncublock step): one line per kernel, most time first, and the total.
  python3 tests/bench/ncu_kernels.py ncu.csv"""
import collections
import csv
import sys


def main(path):
    rows = []
    with open(path, errors="replace") as f:
        lines = [l for l in f if l.startswith('"')]  # the CSV rows; ==PROF== and program output are not
    total = collections.defaultdict(float)
    count = collections.Counter()
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(row["Metric Value"].replace(",", ""))
        scale = {"ns": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "nsecond": 1e-3}
        value *= scale.get(row.get("Metric Unit", "us"), 1.0)
        name = row["Kernel Name"][:110]
        total[name] += value
        count[name] += 1
    for name, us in sorted(total.items(), key=lambda kv: -kv[1]):
        print(f"{us:10.1f} us {count[name]:4d}x  {name}")
    print(f"{sum(total.values()):10.1f} us {sum(count.values()):4d}x  all kernels")


if __name__ == "__main__":
    main(sys.argv[1])
