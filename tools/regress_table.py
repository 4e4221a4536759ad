#!/usr/bin/env python3
"""Sum up device_run.sh's regress stage: for each model and precision, img/s and peak
memory of this build (new) and of the earlier one (base), and both as ratios to PyTorch
in the same call.  python3 tools/regress_table.py OUT_DIR"""
import glob
import json
import os
import re
import sys

MODE = {"fp32": "fp32", "tf32": "tf32", "bf16": "amp_bf16_cl", "fp16": "amp_fp16_cl"}


def last_json(path):
    """The --json summary: the last top-level {...} block of a train log."""
    text = open(path, errors="replace").read()
    start = text.rfind("\n{\n")
    if start < 0:
        return None
    end = text.find("\n}", start)
    try:
        return json.loads(text[start + 1:end + 2])
    except ValueError:
        return None


def main():
    out = sys.argv[1]
    torch = {}
    tpath = os.path.join(out, "regress_torch.log")
    if os.path.exists(tpath):
        for line in open(tpath):
            if line.startswith("{") and '"pytorch"' in line:
                r = json.loads(line)
                torch[(r["model"], r["mode"])] = r
    rows = []
    for path in sorted(glob.glob(os.path.join(out, "regress_*_new.log"))):
        m = re.match(r"regress_(.+)_(fp32|tf32|bf16|fp16)_new\.log", os.path.basename(path))
        if not m:
            continue
        model, prec = m.groups()
        new = last_json(path)
        base = last_json(path.replace("_new.log", "_base.log"))
        t = torch.get((model, MODE[prec]))
        rows.append((model, prec, new, base, t))
    print(f"{'model':<13}{'prec':<6}{'new img/s':>10}{'base':>10}{'new/base':>9}"
          f"{'torch':>9}{'new/t':>7}{'base/t':>7}{'new MiB':>9}{'base MiB':>9}{'torch MiB':>10}")
    for model, prec, new, base, t in rows:
        ni = new["img_s"] if new else float("nan")
        bi = base["img_s"] if base else float("nan")
        ti = t["img_s"] if t else float("nan")
        nm = new["peak_bytes"] / 2**20 if new else float("nan")
        bm = base["peak_bytes"] / 2**20 if base else float("nan")
        tm = t["peak_alloc_mib"] if t else float("nan")
        print(f"{model:<13}{prec:<6}{ni:>10.1f}{bi:>10.1f}{ni / bi:>9.3f}{ti:>9.1f}"
              f"{ni / ti:>7.3f}{bi / ti:>7.3f}{nm:>9.0f}{bm:>9.0f}{tm:>10.1f}")


if __name__ == "__main__":
    main()
