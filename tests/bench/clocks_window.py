#!/usr/bin/env python3
"""The GPU's clocks and power over one h200_session.sh step: reads the samples that
`nvidia-smi --query-gpu=timestamp,power.draw,power.limit,clocks.sm,clocks.mem,
temperature.gpu,clocks_event_reasons.active --format=csv,noheader,nounits -lms 500`
wrote (CLOCKS=1) and prints, for the samples between two epoch seconds, the SM clock's
median and minimum, the power's median and maximum against its limit, the hottest
temperature and the reasons the driver gave for lowering the clocks (a GEMM-bound step
at its power limit runs slower than its first seconds: the block times say so).
  clocks_window.py SAMPLES START_EPOCH END_EPOCH"""
import datetime
import statistics
import sys

# nvmlClocksEventReasons bits (nvml.h).
REASONS = {0x1: "idle", 0x2: "app clocks", 0x4: "sw power cap", 0x8: "hw slowdown", 0x20: "sw thermal",
           0x40: "hw thermal", 0x80: "hw power brake", 0x100: "display clocks"}


def main():
    path, start, end = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
    rows = []
    for line in open(path, errors="replace"):
        f = [x.strip() for x in line.split(",")]
        if len(f) < 7:
            continue
        try:
            t = datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            rows.append((t, float(f[1]), float(f[2]), float(f[3]), float(f[4]), float(f[5]), int(f[6], 16)))
        except ValueError:
            continue
    rows = [r for r in rows if start <= r[0] <= end]
    if not rows:
        print("clocks: no samples in this step")
        return
    sm = [r[3] for r in rows]
    power = [r[1] for r in rows]
    seen = 0
    for r in rows:
        seen |= r[6]
    reasons = ", ".join(n for b, n in REASONS.items() if seen & b) or "none"
    print(f"clocks: {len(rows)} samples, SM median {statistics.median(sm):.0f} MHz (min {min(sm):.0f}, "
          f"max {max(sm):.0f}), memory {statistics.median([r[4] for r in rows]):.0f} MHz, power median "
          f"{statistics.median(power):.0f} W (max {max(power):.0f} of {rows[0][2]:.0f}), up to "
          f"{max(r[5] for r in rows):.0f} C; clocks lowered for: {reasons}")


if __name__ == "__main__":
    main()
