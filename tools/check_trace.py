#!/usr/bin/env python3
"""Load a trace directory with Holistic Trace Analysis and print its temporal
breakdown (idle, compute, non-compute time per rank). Usage: check_trace.py DIR, where
DIR holds the .json trace(s) (for `gpuperf profile` output, DIR/profiler_logs).
Exits 77 when the hta package is missing."""
import os
import sys


def main():
    if len(sys.argv) != 2:
        print("usage: check_trace.py DIR", file=sys.stderr)
        return 2
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError:
        print("skip: python package hta (HolisticTraceAnalysis) not installed")
        return 77
    trace_dir = sys.argv[1]
    logs = os.path.join(trace_dir, "profiler_logs")
    if os.path.isdir(logs):
        trace_dir = logs
    analyzer = TraceAnalysis(trace_dir=trace_dir)
    breakdown = analyzer.get_temporal_breakdown(visualize=False)
    print(breakdown.to_string())
    if breakdown.empty or float(breakdown["compute_time(us)"].sum()) <= 0:
        print("HTA found no compute time", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
