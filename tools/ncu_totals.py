#!/usr/bin/env python3
"""Kernel time by kernel from ncu's CSV (device_run.sh's ktotals stage), one build or
two side by side:
   python3 tools/ncu_totals.py NEW.csv [BASE.csv]

Each CSV is `ncu --csv --metrics gpu__time_duration.sum[,dram__...]` over the same
kernels of the same run (a training run's first steps, a kernel name filter). Prints,
per kernel name (template arguments and parameters dropped), the launches, the total
time in us and, with a base, the base's total and new / base; then the totals. With a
base the two runs must have launched the same kernels in the same order (the same
model, precision and steps): kernels are paired by position, and a name that differs
at a position is reported rather than paired silently (s22: the backward reduce
1.29x, found this way)."""
import collections
import csv
import sys

UNIT_NS = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9, "second": 1e9}


def kernels(path):
    """[(name, ns)] in launch order."""
    with open(path, newline="") as f:
        rows = list(csv.reader(line for line in f if line.startswith('"')))
    if not rows:
        sys.exit(f"{path}: no ncu CSV rows (did ncu profile anything?)")
    col = {k: i for i, k in enumerate(rows[0])}
    for need in ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value"):
        if need not in col:
            sys.exit(f"{path}: no '{need}' column: not `ncu --csv --metrics ...` output")
    out = collections.OrderedDict()
    for r in rows[1:]:
        if "duration" not in r[col["Metric Name"]]:
            continue
        unit = r[col["Metric Unit"]]
        if unit not in UNIT_NS:
            sys.exit(f"{path}: unknown time unit '{unit}'")
        name = r[col["Kernel Name"]].split("(")[0].split("<")[0].replace("void ", "").strip()
        out[r[col["ID"]]] = (name, float(r[col["Metric Value"]].replace(",", "")) * UNIT_NS[unit])
    return list(out.values())


def main(argv):
    if len(argv) not in (2, 3):
        sys.exit(__doc__)
    new = kernels(argv[1])
    base = kernels(argv[2]) if len(argv) == 3 else None
    if base is not None:
        if len(base) != len(new):
            print(f"warning: {len(new)} kernels against {len(base)} in the base: paired up to the shorter")
        bad = sum(1 for a, b in zip(new, base) if a[0] != b[0])
        if bad:
            print(f"warning: {bad} positions launch different kernels: the runs differ")
    tot = collections.OrderedDict()
    for i, (name, ns) in enumerate(new):
        t = tot.setdefault(name, [0, 0.0, 0.0])
        t[0] += 1
        t[1] += ns
        if base is not None and i < len(base) and base[i][0] == name:
            t[2] += base[i][1]
    w = max([len(n) for n in tot] + [6])
    head = f"{'kernel':<{w}}  {'n':>5}  {'new us':>10}"
    print(head + (f"  {'base us':>10}  {'new/base':>8}" if base is not None else ""))
    for name, (n, ns, bns) in tot.items():
        line = f"{name:<{w}}  {n:>5}  {ns / 1e3:>10.1f}"
        if base is not None:
            line += f"  {bns / 1e3:>10.1f}  {ns / bns:>8.3f}" if bns else f"  {'-':>10}  {'-':>8}"
        print(line)
    all_new = sum(ns for _, ns in new)
    line = f"{'all':<{w}}  {len(new):>5}  {all_new / 1e3:>10.1f}"
    if base is not None:
        all_base = sum(ns for _, ns in base)
        line += f"  {all_base / 1e3:>10.1f}  {all_new / all_base:>8.3f}"
    print(line)


if __name__ == "__main__":
    main(sys.argv)
