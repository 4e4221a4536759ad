#!/usr/bin/env python3
"""Load a trace directory with Holistic Trace Analysis and print its temporal
breakdown (idle, compute, non-compute time per rank). Usage: check_trace.py [--json]
DIR, where DIR holds the .json trace(s) (for `gpuperf profile` output,
DIR/profiler_logs). With --json a last line `HTA_JSON {...}` carries rank 0's
temporal breakdown, idle time by cause per stream and launch delays, for the test
that holds gpuperf's own figures to HTA's. Exits 77 when the hta package is missing."""
import json
import os
import sys


def main():
    args = sys.argv[1:]
    want_json = bool(args) and args[0] == "--json"
    if want_json:
        args = args[1:]
    if len(args) != 1:
        print("usage: check_trace.py [--json] DIR", file=sys.stderr)
        return 2
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError:
        print("skip: python package hta (HolisticTraceAnalysis) not installed")
        return 77
    trace_dir = args[0]
    logs = os.path.join(trace_dir, "profiler_logs")
    if os.path.isdir(logs):
        trace_dir = logs
    analyzer = TraceAnalysis(trace_dir=trace_dir)
    breakdown = analyzer.get_temporal_breakdown(visualize=False)
    print(breakdown.to_string())
    if breakdown.empty or float(breakdown["compute_time(us)"].sum()) <= 0:
        print("HTA found no compute time", file=sys.stderr)
        return 1
    if want_json:
        row = breakdown.iloc[0]
        out = {k: float(row[k + "(us)"]) for k in
               ("idle_time", "compute_time", "non_compute_time", "kernel_time")}
        idle = analyzer.get_idle_time_breakdown(visualize=False)[0]
        out["idle"] = {f"{int(r.stream)}/{r.idle_category}": float(r.idle_time)
                       for r in idle.itertuples()}
        delays = []
        for df in analyzer.get_cuda_kernel_launch_stats(visualize=False).values():
            delays += [float(x) for x in df["launch_delay"]]
        out["launch_delay_mean"] = sum(delays) / len(delays) if delays else 0.0
        print("HTA_JSON " + json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
