#!/usr/bin/env python3
"""Per-block GPU times from a step_bench Chrome trace (--trace=FILE): the mean and
median of the compute stream's "forward block N" and "backward block N" spans over every
traced step but the first (warm-up), per micro-batch (e.g. 4 x 4096 = 16K tokens): a
layer-major block's span covers the micro-batches a unit runs per step and is divided by
them. With --kept=K of --layers=L (policy.kept_blocks: the last K blocks keep their graph
and run micro-batch-major, one span per micro-batch), the kept blocks' spans are shown
apart from the recomputing ones'.
  trace_blocks.py TRACE --micro_batches=4 [--label=NAME] [--kept=K --layers=L]"""
import argparse
import json
import statistics


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--micro_batches", type=int, default=1)
    ap.add_argument("--label", default="")
    ap.add_argument("--kept", type=int, default=0)
    ap.add_argument("--layers", type=int, default=0)
    a = ap.parse_args()
    events = json.load(open(a.trace))["traceEvents"]
    first_kept = a.layers - a.kept if a.kept > 0 else 1 << 30
    spans = {"forward": [], "backward": []}
    if a.kept > 0:
        spans = {"forward": [], "forward (kept)": [], "backward (recompute)": [], "backward (kept)": []}
    for e in events:
        if e.get("ph") != "X" or e.get("pid") != 0:
            continue
        name = e["name"]
        for phase in ("forward", "backward"):
            if name.startswith(phase + " block "):
                kept = int(name.split()[-1]) >= first_kept
                key = phase
                if a.kept > 0:
                    key = f"{phase} (kept)" if kept else ("backward (recompute)" if phase == "backward" else phase)
                # A kept block's span is one micro-batch's.
                spans[key].append((e["ts"], e["dur"] / 1000.0 / (1 if kept else a.micro_batches)))
    # The head's spans in a step: one a micro-batch ("head", its loss and backward).
    spans["head"] = [(e["ts"], e["dur"] / 1000.0) for e in events
                     if e.get("ph") == "X" and e.get("pid") == 0 and e["name"] == "head"]
    for phase, xs in spans.items():
        xs.sort()
        if not xs:
            print(f"{a.label} {phase}: no spans")
            continue
        # Drop the first step's spans: the first 1/steps of them in time order.
        per_step = max(1, len([e for e in events if e.get("ph") == "X" and e.get("pid") == 0
                               and e["name"] == "forward embedding"]))
        keep = xs[len(xs) // per_step:] if per_step > 1 else xs
        ms = [d for _, d in keep]
        what = "head" if phase == "head" else f"{phase} block"
        print(f"{a.label} {what} per micro-batch: mean {statistics.mean(ms):.3f} ms, "
              f"median {statistics.median(ms):.3f} ms over {len(ms)} spans")


if __name__ == "__main__":
    main()
