#!/usr/bin/env python3
"""Read a TensorBoard log directory with TensorBoard's own EventAccumulator and print
every scalar as "TAG STEP VALUE", one a line. Exits 77 when tensorboard is missing."""
import sys


def main():
    if len(sys.argv) != 2:
        print("usage: check_tb.py LOGDIR", file=sys.stderr)
        return 2
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError:
        print("skip: python package tensorboard not installed")
        return 77
    acc = EventAccumulator(sys.argv[1])
    acc.Reload()
    tags = acc.Tags().get("scalars", [])
    if not tags:
        print("no scalars found in", sys.argv[1], file=sys.stderr)
        return 1
    for tag in tags:
        for ev in acc.Scalars(tag):
            print(f"{tag} {ev.step} {ev.value:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
