#!/usr/bin/env python3
"""Per-block GPU times from a step_bench Chrome trace (--trace=FILE): the mean and
median of the compute stream's "forward block N" and "backward block N" spans over every
traced step but the first (warm-up), divided by the micro-batches a unit runs per step,
so the figures are per micro-batch (e.g. 4 x 4096 = 16K tokens).
  trace_blocks.py TRACE --micro_batches=4 [--label=NAME]"""
import argparse
import json
import statistics


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--micro_batches", type=int, default=1)
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    events = json.load(open(a.trace))["traceEvents"]
    spans = {"forward": [], "backward": []}
    for e in events:
        if e.get("ph") != "X" or e.get("pid") != 0:
            continue
        name = e["name"]
        for phase in spans:
            if name.startswith(phase + " block "):
                spans[phase].append((e["ts"], e["dur"] / 1000.0))
    for phase, xs in spans.items():
        xs.sort()
        if not xs:
            print(f"{a.label} {phase}: no spans")
            continue
        # Drop the first step's spans: the first 1/steps of them in time order.
        per_step = max(1, len([e for e in events if e.get("ph") == "X" and e.get("pid") == 0
                               and e["name"] == f"{phase} block 0"]))
        keep = xs[len(xs) // per_step:] if per_step > 1 else xs
        ms = [d / a.micro_batches for _, d in keep]
        print(f"{a.label} {phase} block per micro-batch: mean {statistics.mean(ms):.3f} ms, "
              f"median {statistics.median(ms):.3f} ms over {len(ms)} spans")


if __name__ == "__main__":
    main()
