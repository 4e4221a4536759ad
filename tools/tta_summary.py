#!/usr/bin/env python3
"""Sum up a time-to-accuracy comparison (docs/training.md): gpuperf's train.json files
against PyTorch's (tests/torch/tta.py), the same recipe and seeds.

  python3 tools/tta_summary.py --gpuperf A1.json A2.json A3.json \
      --pytorch B1.json B2.json B3.json [--json summary.json]

For each engine: the median over its runs of the final val top-1 (the last epoch's) and of
the wall time (time_s of the last epoch: the whole run, data loading and validation
included). The target is PyTorch's median final val top-1. For each gpuperf run, the time it
reaches the target is read off its history, the points (time_s, val_top1) of the epochs that
were validated: at the first point at or above the target, interpolated linearly from the
point before it (accuracy taken to grow linearly in wall time between two validations); the
first point itself when it is the run's first validation; none when the run never reaches
the target. The same without interpolation (the validation that first shows it) is given
beside it, as an upper bound. Ratio = median of gpuperf's times to the target / PyTorch's
median wall time. The issue's bars: |gpuperf - PyTorch| <= 1 point, ratio <= 0.7.

A train.json keeps "history" at the top level (or under "measurements"); "final_val_top1"
when present, else the last validated epoch's val_top1. Exit status 0 when the summary was
written, 1 for unreadable input (one line); the bars' verdict is in the output, not the
exit status.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

BAR_POINTS = 1.0
BAR_RATIO = 0.7


class Bad(Exception):
    pass


def load(path):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise Bad(f"{path}: {e}")
    hist = doc.get("history")
    if hist is None and isinstance(doc.get("measurements"), dict):
        hist = doc["measurements"].get("history")
    if not isinstance(hist, list) or not hist:
        raise Bad(f"{path}: no \"history\" (a train.json from a run with --epochs and val/)")
    pts = []
    for h in hist:
        t, a = h.get("time_s"), h.get("val_top1")
        if not isinstance(t, (int, float)):
            raise Bad(f"{path}: epoch {h.get('epoch')} has no time_s")
        if isinstance(a, (int, float)):
            if pts and t < pts[-1][0]:
                raise Bad(f"{path}: time_s goes backwards at epoch {h.get('epoch')}")
            pts.append((float(t), float(a)))
    if not pts:
        raise Bad(f"{path}: no epoch was validated (val_top1 is null throughout)")
    final = doc.get("final_val_top1")
    if not isinstance(final, (int, float)):
        final = pts[-1][1]
    seed = (doc.get("settings") or {}).get("seed")
    return {"path": path, "seed": seed, "engine": doc.get("engine", "gpuperf"),
            "final_val_top1": float(final), "wall_s": float(hist[-1]["time_s"]), "points": pts}


def time_to(points, target):
    """(interpolated, at the validation) time the curve first reaches target; Nones if never."""
    for i, (t, a) in enumerate(points):
        if a >= target:
            if i == 0:
                return t, t
            t0, a0 = points[i - 1]
            return t0 + (target - a0) / (a - a0) * (t - t0), t
    return None, None


def summarize(gp_paths, pt_paths):
    gp = [load(p) for p in gp_paths]
    pt = [load(p) for p in pt_paths]
    gp_final = statistics.median(r["final_val_top1"] for r in gp)
    pt_final = statistics.median(r["final_val_top1"] for r in pt)
    pt_wall = statistics.median(r["wall_s"] for r in pt)
    target = pt_final
    for r in gp:
        r["time_to_target_s"], r["time_to_target_at_val_s"] = time_to(r["points"], target)
    reached = [r["time_to_target_s"] for r in gp]
    # a run that never gets there counts as infinitely slow in the median
    inf = float("inf")
    med = statistics.median(t if t is not None else inf for t in reached)
    med_val = statistics.median(r["time_to_target_at_val_s"] if r["time_to_target_at_val_s"]
                                is not None else inf for r in gp)
    ratio = med / pt_wall if med != inf else None
    ratio_val = med_val / pt_wall if med_val != inf else None
    diff = gp_final - pt_final
    out = {
        "target_val_top1": target,
        "gpuperf": {"runs": len(gp), "median_final_val_top1": gp_final,
                    "median_wall_s": statistics.median(r["wall_s"] for r in gp),
                    "median_time_to_target_s": med if med != inf else None},
        "pytorch": {"runs": len(pt), "median_final_val_top1": pt_final, "median_wall_s": pt_wall},
        "final_diff_points": diff,
        "time_ratio": ratio,
        "time_ratio_at_val": ratio_val,
        "bars": {"final_within_points": BAR_POINTS, "time_ratio_at_most": BAR_RATIO,
                 "final_ok": abs(diff) <= BAR_POINTS,
                 "time_ok": ratio is not None and ratio <= BAR_RATIO},
        "runs": [{k: r[k] for k in r if k != "points"} for r in gp + pt],
    }
    return out


def markdown(s):
    g, p = s["gpuperf"], s["pytorch"]
    f = lambda v, fmt: "n/a" if v is None else format(v, fmt)  # noqa: E731
    lines = [
        "| engine | runs | median final val top-1 | median wall time | time to PyTorch's final |",
        "| --- | ---: | ---: | ---: | ---: |",
        f"| gpuperf | {g['runs']} | {g['median_final_val_top1']:.2f}% | {g['median_wall_s']:.1f} s "
        f"| {f(g['median_time_to_target_s'], '.1f')} s |",
        f"| PyTorch | {p['runs']} | {p['median_final_val_top1']:.2f}% | {p['median_wall_s']:.1f} s "
        f"| {p['median_wall_s']:.1f} s |",
        "",
        f"final val top-1: gpuperf - PyTorch = {s['final_diff_points']:+.2f} points "
        f"(bar: within {BAR_POINTS:g}: {'met' if s['bars']['final_ok'] else 'NOT met'})",
        f"gpuperf's time to {s['target_val_top1']:.2f}% / PyTorch's wall time = "
        f"{f(s['time_ratio'], '.3f')} (interpolated), {f(s['time_ratio_at_val'], '.3f')} "
        f"(at the validation that shows it) (bar: at most {BAR_RATIO:g}: "
        f"{'met' if s['bars']['time_ok'] else 'NOT met'})",
        "",
        "| run | engine | seed | final val top-1 | wall time | time to target |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in s["runs"]:
        tt = r.get("time_to_target_s", r["wall_s"] if r["engine"] == "pytorch" else None)
        lines.append(f"| {r['path']} | {r['engine']} | {r['seed']} | {r['final_val_top1']:.2f}% "
                     f"| {r['wall_s']:.1f} s | {f(tt, '.1f')} s |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpuperf", nargs="+", required=True, metavar="TRAIN_JSON")
    ap.add_argument("--pytorch", nargs="+", required=True, metavar="TRAIN_JSON")
    ap.add_argument("--json", help="write the summary here too")
    a = ap.parse_args(argv)
    try:
        s = summarize(a.gpuperf, a.pytorch)
    except Bad as e:
        print(f"tta_summary: {e}", file=sys.stderr)
        return 1
    print(markdown(s))
    if a.json:
        d = os.path.dirname(os.path.abspath(a.json))
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".tta_summary.")
        with os.fdopen(fd, "w") as f:
            json.dump(s, f, indent=1)
            f.write("\n")
        os.replace(tmp, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
