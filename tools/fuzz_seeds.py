#!/usr/bin/env python3
"""Write the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/) from the test
data: small valid inputs of each format and a few near misses, so that the fuzzers
start inside each parser rather than at its first check. Run from the repository
root; the output is committed, so this only needs running when the formats change."""
import json
import os
import shutil
import struct
import zlib

OUT = "tests/fuzz/corpus"


def put(target, name, data):
    os.makedirs(os.path.join(OUT, target), exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(OUT, target, name), "wb") as f:
        f.write(data)


def safetensors(entries, meta=None, pad=True):
    """entries: (name, dtype, shape, bytes) in data order."""
    header, off, blob = {}, 0, b""
    if meta is not None:
        header["__metadata__"] = meta
    for name, dtype, shape, data in entries:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
        blob += data
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + blob


def seeds_safetensors():
    shutil.copy("tests/data/ckpt/python_written.safetensors", os.path.join(OUT, "safetensors"))
    f32 = lambda n: struct.pack("<%df" % n, *[0.5 * i for i in range(n)])
    # the fuzz target's net: conv1 [2,1,1,1], bn1 [2] x4, fc [3,2], a counter
    net = [("conv1.weight", "F32", [2, 1, 1, 1], f32(2)),
           ("bn1.weight", "F32", [2], f32(2)), ("bn1.bias", "F32", [2], f32(2)),
           ("fc.weight", "F32", [3, 2], f32(6)),
           ("bn1.running_mean", "F32", [2], f32(2)), ("bn1.running_var", "F32", [2], f32(2)),
           ("bn1.num_batches_tracked", "I64", [], struct.pack("<q", 7))]
    put("safetensors", "net_f32", safetensors(net, {"format": "pt"}))
    half = [(n, {"F32": "BF16"}.get(d, d), s, b[: len(b) // 2]) for n, d, s, b in net]
    put("safetensors", "net_bf16", safetensors(half))
    half = [(n, {"F32": "F16", "I64": "I32"}.get(d, d), s, b[: len(b) // 2]) for n, d, s, b in net]
    put("safetensors", "net_f16_i32", safetensors(half))
    put("safetensors", "dtypes", safetensors(
        [("a", "F64", [1], b"\0" * 8), ("b", "U8", [2, 2], b"\1" * 4),
         ("c", "BOOL", [1], b"\1"), ("d", "F8_E4M3", [1], b"\2")], pad=False))
    put("safetensors", "empty", safetensors([]))
    put("safetensors", "overlap", safetensors([("a", "F32", [1], f32(1))])[:-2])


def seeds_result():
    for name in ("sample_amp.json", "sample_maxbatch.json"):
        shutil.copy(os.path.join("tests/data", name), os.path.join(OUT, "result", name))
    # the workers sample, with fewer utilization samples per run to keep it small
    res = json.load(open("tests/data/sample_workers.json"))
    for run in res["measurements"].get("runs", []):
        run["samples"] = run["samples"][:6]
    put("result", "sample_workers.json", json.dumps(res, indent=1))
    put("result", "minimal.json", json.dumps(
        {"schema": "gpuperf.result/1", "command": "compare", "measurements": {}}))


def seeds_trace():
    d = json.load(open("tests/data/sample_trace/profiler_trace.json"))
    ev = d["traceEvents"]
    steps = [e for e in ev if e.get("name", "").startswith("ProfilerStep#")]
    # the first step and everything inside it; the gpu events of its kernels
    end = steps[0]["ts"] + steps[0]["dur"]
    keep = [e for e in ev if e.get("ph") == "M" or (e.get("ts", 0) <= end and e.get("ph") != "f")]
    kept = keep[:60] + [e for e in ev if e.get("cat") == "kernel"][:8]
    small = dict(d, traceEvents=kept)
    put("trace", "one_step.json", json.dumps(small))
    # without our fields: a torch.profiler trace gets data waits from "data" ranges
    torch = {"traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "ts": 0, "dur": 100,
         "tid": 1, "args": {}},
        {"ph": "X", "cat": "user_annotation", "name": "data", "ts": 1, "dur": 10, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::conv2d", "ts": 12, "dur": 30, "tid": 1,
         "args": {"External id": 5}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 14, "dur": 3,
         "tid": 1, "args": {"correlation": 9, "External id": 5}},
        {"ph": "X", "cat": "kernel", "name": "_Z6kernelPf", "ts": 20, "dur": 40, "pid": 0,
         "tid": 7, "args": {"correlation": 9, "grid": [1, 1, 1], "block": [32, 1, 1]}},
        {"ph": "X", "cat": "gpu_memset", "name": "Memset", "ts": 61, "dur": 1, "pid": 0,
         "tid": 7, "args": {"bytes": 64}},
        {"ph": "i", "name": "[memory]", "ts": 5, "tid": 1,
         "args": {"Total Allocated": 1024, "Bytes": 1024, "Category": "activations",
                  "Layer": "conv1"}}]}
    put("trace", "torch_style.json", json.dumps(torch))


def seeds_args():
    for i, argv in enumerate([
            ["--steps", "10", "--batch=32", "--json"],
            ["--workers", "0", "2", "4", "--lr", "0.1", "--out", "results"],
            ["--workers=0,5,9", "--mem-limit-mib", "-1"],
            ["--lr", "1e-3", "--batch", "1"]]):
        put("args", "argv%d" % i, "\0".join(argv))


def png(w, h, color_type, depth, rows):
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    ihdr = struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0, 0)
    raw = b"".join(b"\0" + r for r in rows)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + \
        chunk(b"IEND", b"")


def seeds_image():
    for root, _, files in os.walk("tests/data/bad"):
        for name in sorted(files):
            shutil.copy(os.path.join(root, name),
                        os.path.join(OUT, "image", os.path.basename(root) + "_" + name))
    put("image", "rgb8.png", png(5, 3, 2, 8, [bytes(range(r, r + 15)) for r in range(3)]))
    put("image", "rgba8.png", png(3, 4, 6, 8, [bytes([r * 40, 9, 200, r * 60] * 3) for r in range(4)]))
    put("image", "grey16.png", png(4, 2, 0, 16, [bytes(range(8)), bytes(range(8, 16))]))


if __name__ == "__main__":
    # Files are overwritten, never removed: the corpora also keep the inputs that
    # found bugs (found-*), beside the regression tests written for them.
    for t in ("safetensors", "result", "trace", "args", "image"):
        os.makedirs(os.path.join(OUT, t), exist_ok=True)
    seeds_safetensors()
    seeds_result()
    seeds_trace()
    seeds_args()
    seeds_image()
