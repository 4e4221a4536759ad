#!/usr/bin/env python3
"""Issue 21 item 6: final val top-1 of the time-to-accuracy recipe run with --decode gpu
and with --decode cpu (tools/tta.sh with TTA_TORCH=0 into two folders); per seed, the
medians and their difference against the 1-point bar.

  python3 tools/dev/decode_acc.py GPU_RUN_DIR CPU_RUN_DIR
"""
import json
import os
import statistics
import sys


def final(path):
    j = json.load(open(path))
    h = j.get("history") or j.get("measurements", {}).get("history", [])
    top1 = j.get("final_val_top1", h[-1]["val_top1"] if h else None)
    return top1, (h[-1]["time_s"] if h else None)


def main(gpu_dir, cpu_dir):
    med = {}
    for name, d in (("gpu", gpu_dir), ("cpu", cpu_dir)):
        vals = []
        for run in sorted(os.listdir(d)):
            p = os.path.join(d, run, "train.json")
            if not run.startswith("gpuperf_s") or not os.path.exists(p):
                continue
            top1, wall = final(p)
            if top1 is None:
                continue
            vals.append(top1)
            print(f"--decode {name} {run}: final val top-1 {top1:.2f}%, wall {wall:.1f} s")
        if not vals:
            print(f"decode_acc: no finished run in {d}", file=sys.stderr)
            return 1
        med[name] = statistics.median(vals)
    d = med["gpu"] - med["cpu"]
    print(f"median final val top-1: gpu {med['gpu']:.2f}%, cpu {med['cpu']:.2f}%, "
          f"gpu - cpu {d:+.2f} points (bar: within 1: {'met' if abs(d) <= 1 else 'NOT met'})")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
