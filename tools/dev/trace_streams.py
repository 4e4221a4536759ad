#!/usr/bin/env python3
"""GPU time by stream in gpuperf profile folders, per recorded step.

  python3 tools/dev/trace_streams.py RUN_DIR [RUN_DIR ...]

For each folder (gpuperf profile --out RUN_DIR): the steps' mean wall time, then per
stream the GPU events (kernels, copies, sets) per step, their time per step and the
names that take most of it; then the GPU's busy time (any stream) per step. Written to
see what a decoding thread takes from the step beside it (issue 21): the net's
streams with and without it, the decoder's and nvJPEG's own.
"""
import collections
import glob
import json
import os
import sys


def union_us(iv):
    busy, cs, ce = 0.0, None, None
    for a, b in sorted(iv):
        if cs is None or a > ce:
            if cs is not None:
                busy += ce - cs
            cs, ce = a, b
        else:
            ce = max(ce, b)
    return busy + (ce - cs if cs is not None else 0.0)


def gaps(ev, gpu, by, n):
    """The busiest stream's gaps over 20 us: launched late (the host was elsewhere:
    what its thread ran meanwhile) or launched in time (the GPU waited on something)."""
    if not by:
        return
    net = max(by.items(), key=lambda kv: kv[1][1])[0]
    mine = sorted((e for e in gpu if e.get("args", {}).get("stream") == net), key=lambda e: e["ts"])
    launch = {e["args"].get("correlation"): e for e in ev
              if e.get("ph") == "X" and e.get("cat") == "cuda_runtime"}
    cpu = collections.defaultdict(list)
    for e in ev:
        if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "user_annotation", "cpu_op"):
            cpu[e.get("tid")].append(e)
    late, waited, rows = 0.0, 0.0, []
    end = mine[0]["ts"] + mine[0]["dur"]
    for e in mine[1:]:
        g = e["ts"] - end
        if g > 20:
            L = launch.get(e["args"].get("correlation"))
            if L and L["ts"] > end + 5:
                late += g
                inside = collections.Counter()
                for c in cpu[L["tid"]]:
                    a, b = max(c["ts"], end), min(c["ts"] + c["dur"], L["ts"])
                    if b > a and c is not L and not c["name"].startswith("ProfilerStep#"):
                        inside[c["name"][:40]] += b - a
                what = ", ".join(f"{k} {v:.0f}" for k, v in inside.most_common(3))
                rows.append((g, "late", e["name"][:40], what))
            else:
                waited += g
                others = collections.Counter()
                for o in gpu:
                    if o["args"].get("stream") != net and o["ts"] < e["ts"] and o["ts"] + o["dur"] > end:
                        others[o["name"][:30]] += min(o["ts"] + o["dur"], e["ts"]) - max(o["ts"], end)
                what = ", ".join(f"{k} {v:.0f}" for k, v in others.most_common(3))
                rows.append((g, "in time", e["name"][:40], what))
        end = max(end, e["ts"] + e["dur"])
    print(f"  stream {net}'s gaps over 20 us: {late / n / 1000:.3f} ms a step launched late, "
          f"{waited / n / 1000:.3f} ms launched in time (waiting on the GPU)")
    for g, kind, name, what in sorted(rows, reverse=True)[:12]:
        print(f"    {g:8.0f} us {kind:8s} before {name}: {what}")


def main(dirs):
    for d in dirs:
        if not os.path.isdir(d):
            continue
        paths = glob.glob(d + "/profiler_logs/*.pt.trace.json")
        if not paths:
            print(f"{d}: no profiler_logs/*.pt.trace.json", file=sys.stderr)
            return 1
        ev = json.load(open(paths[0]))["traceEvents"]
        steps = [e for e in ev if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]
        if not steps:
            print(f"{d}: no ProfilerStep events", file=sys.stderr)
            return 1
        t0 = min(s["ts"] for s in steps)
        t1 = max(s["ts"] + s["dur"] for s in steps)
        n = len(steps)
        gpu = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
               and t0 <= e["ts"] < t1]
        by = collections.defaultdict(lambda: [0, 0.0, collections.Counter(), []])
        for e in gpu:
            b = by[e.get("args", {}).get("stream")]
            b[0] += 1
            b[1] += e["dur"]
            b[2][e["name"][:70]] += e["dur"]
            b[3].append((e["ts"], e["ts"] + e["dur"]))
        print(f"{d}: {n} steps, {(t1 - t0) / n / 1000:.3f} ms a step")
        for s, b in sorted(by.items(), key=lambda kv: -kv[1][1]):
            top = "; ".join(f"{k} {v / n / 1000:.3f}" for k, v in b[2].most_common(4))
            print(f"  stream {s}: {b[0] / n:.1f} events a step, {b[1] / n / 1000:.3f} ms "
                  f"(busy {union_us(b[3]) / n / 1000:.3f}); {top}")
        print(f"  GPU busy on any stream: {union_us([(e['ts'], e['ts'] + e['dur']) for e in gpu]) / n / 1000:.3f} ms a step")
        gaps(ev, gpu, by, n)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
