#!/usr/bin/env python3
"""Where a step's GPU memory goes, from a step_bench Chrome trace (--trace=FILE): the
worker's "gpu memory GiB" counters (allocated, and the step's peak so far, read as each
compute span's work was issued). For the last traced step of worker 0: the allocated
bytes at its first compute span (what stays between steps: slots, accumulators,
resident units) and at most, its peak, and the compute spans that raised the peak most
(the phase the plan's memory estimate must cover).
  trace_memory.py TRACE [--top=8]"""
import argparse
import bisect
import json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=8)
    a = ap.parse_args()
    events = json.load(open(a.trace))["traceEvents"]
    tids = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
            if e.get("ph") == "M" and e.get("name") == "thread_name"}
    compute_ends = []  # (end, name) of worker 0's compute spans
    step_starts = []
    for e in events:
        if e.get("ph") != "X" or e.get("pid") != 0:
            continue
        if tids.get((0, e["tid"])) == "compute":
            compute_ends.append((e["ts"] + e["dur"], e["name"]))
        if e["name"] == "forward embedding":
            step_starts.append(e["ts"])
    counters = sorted((e["ts"], e["args"]) for e in events
                      if e.get("ph") == "C" and e.get("pid") == 0 and e.get("name") == "gpu memory GiB")
    if not counters:
        print("memory: no counters in this trace (a trace of the CPU device, or of an older build)")
        return
    compute_ends.sort()
    ends = [t for t, _ in compute_ends]

    def span_at(t):  # the compute span ending at t (the counter's time), within 1 us
        i = bisect.bisect_left(ends, t - 1.0)
        return compute_ends[i][1] if i < len(ends) and abs(ends[i] - t) <= 1.0 else "?"

    start = max(step_starts) if step_starts else counters[0][0]
    last = [(t, v) for t, v in counters if t >= start] or counters
    rises = []
    prev = None
    for t, v in last:
        if prev is not None and v["peak"] > prev:
            rises.append((v["peak"] - prev, span_at(t), v["peak"]))
        prev = v["peak"]
    alloc = [v["allocated"] for _, v in last]
    print(f"memory, last step ({len(last)} compute spans): allocated at its first span {alloc[0]:.2f} GiB, "
          f"at most {max(alloc):.2f}, at its last {alloc[-1]:.2f}; peak {last[-1][1]['peak']:.2f} GiB")
    for rise, name, peak in sorted(rises, reverse=True)[:a.top]:
        print(f"  peak +{rise:.2f} GiB to {peak:.2f} in {name}")


if __name__ == "__main__":
    main()
