#!/usr/bin/env python3
"""Read a safetensors file with the reference library (safetensors.numpy) and print
its metadata and one line per tensor: name, dtype, shape and the sum of its values.

A file that loads here loads in PyTorch too; the sums let a test compare the data,
not only the header. Usage: tools/safetensors_check.py FILE
"""
import json
import struct
import sys

import numpy as np
from safetensors.numpy import load_file


def read_metadata(path):
    """The __metadata__ map, read from the header as the spec lays it out."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return header.get("__metadata__", {})


def main(argv):
    if len(argv) != 2:
        print("usage: safetensors_check.py FILE", file=sys.stderr)
        return 2
    path = argv[1]
    tensors = load_file(path)
    meta = read_metadata(path)
    print("metadata " + " ".join(f"{k}={meta[k]}" for k in sorted(meta)))
    for name, t in tensors.items():
        total = float(np.asarray(t, dtype=np.float64).sum())
        print(f"{name} {t.dtype} {tuple(t.shape)} sum={total!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
