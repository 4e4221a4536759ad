#!/usr/bin/env python3
"""Kernel time per step by kernel family from a gpuperf profile trace:
   python3 tools/dwsum.py TRACE STEPS [FILTER]"""
import collections, json, re, sys

ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("cat") == "kernel"]
steps = int(sys.argv[2])
want = sys.argv[3] if len(sys.argv) > 3 else ""
tot = collections.Counter()
for k in ev:
    n = re.sub(r"^_Z\d+", "", k["name"])
    n = re.sub(r"I13__nv_bfloat16|I6__half", "", n)[:48]
    if want in n:
        tot[n] += k["dur"] / 1000 / steps
print(f"all kernels {sum(k['dur'] for k in ev) / 1000 / steps:.3f} ms/step")
for n, d in tot.most_common(12):
    print(f"  {d:7.3f}  {n}")
