#!/usr/bin/env python3
"""Where a training step spends GPU time, kernel by kernel and by class (convolutions by
direction, cuBLAS products, cuDNN batch norms, Triton's fused kernels, each other kernel
by name), for PyTorch beside gpuperf on one GPU:

  python3 tools/torch_profile.py --model resnet50 --batch 256 --mode amp_bf16_cl_compile [--steps 5]
  python3 tools/torch_profile.py --trace DIR/profiler_trace.json --steps 5   # gpuperf profile's

The first runs the step of ../shared/bench/torch_baseline.py (synthetic batch on the GPU,
SGD momentum 0.9, cudnn.benchmark; modes fp32, tf32, amp_bf16, amp_fp16, suffix _cl
channels last, _compile torch.compile) and profiles --steps steps; the second reads the
Kineto trace `gpuperf profile --steps N` wrote. Both print the same tables.
"""
import argparse
import collections
import json
import re


def kernel_class(name):
    n = name.lower()
    if "triton" in n:
        return "triton"
    if "nvjet" in n or ("gemm" in n and not any(k in n for k in ("fprop", "dgrad", "wgrad", "conv"))):
        return "gemm"
    for k in ("wgrad", "dgrad", "fprop"):
        if k in n:
            return "conv_" + k
    if any(k in n for k in ("conv", "xmma", "cutlass", "implicit")):
        return "conv_other"
    if any(k in n for k in ("bn_fw", "bn_bw", "batch_norm", "batchnorm")):
        return "cudnn_bn"
    return base_name(name)[:40]


def base_name(name):
    """A kernel's function name without namespaces and template arguments, from a
    mangled (_Z...) or a printed one."""
    m = re.match(r"_ZN?((?:\d+\w+?)+)(?:I|E|v|$)", name)
    if m:  # <len><id> pieces: the last is the function
        s, parts = m.group(1), []
        while s and s[0].isdigit():
            k = re.match(r"\d+", s).group(0)
            parts.append(s[len(k):len(k) + int(k)])
            s = s[len(k) + int(k):]
        if parts:
            return parts[-1]
    m = re.match(r"(?:void )?(?:[\w]+::)*(\w+)", name)
    return m.group(1) if m else name


def report(label, kernels, steps, rows):
    """kernels: (name, microseconds) for every kernel of `steps` steps."""
    by, cl = collections.defaultdict(lambda: [0, 0.0]), collections.defaultdict(lambda: [0, 0.0])
    for name, us in kernels:
        for t, k in ((by, name), (cl, kernel_class(name))):
            t[k][0] += 1
            t[k][1] += us / 1e3
    total = sum(ms for _, ms in by.values()) / steps
    print(f"{label}: kernel time {total:.3f} ms per step, {len(kernels) / steps:.0f} kernels per step")
    print(f"  {'class':40s} {'count':>6s} {'ms/step':>9s}")
    for k, (n, ms) in sorted(cl.items(), key=lambda kv: -kv[1][1]):
        print(f"  {k:40s} {n // steps:6d} {ms / steps:9.3f}")
    print(f"  {'kernel':90s} {'count':>6s} {'ms/step':>9s}")
    for name, (n, ms) in sorted(by.items(), key=lambda kv: -kv[1][1])[:rows]:
        print(f"  {name[:90]:90s} {n // steps:6d} {ms / steps:9.3f}")


def from_trace(a):
    t = json.load(open(a.trace))
    ev = t["traceEvents"] if isinstance(t, dict) else t
    ks = [(e["name"], e.get("dur", 0)) for e in ev if e.get("cat") in ("kernel", "Kernel") and e.get("ph") == "X"]
    report(f"{a.trace} ({a.steps} steps)", ks, a.steps, a.rows)


def from_torch(a):
    import torch
    import torch.nn as nn
    import torchvision.models as tvm
    from torch.profiler import ProfilerActivity, profile

    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = not a.mode.startswith("fp32")
    torch.backends.cudnn.allow_tf32 = not a.mode.startswith("fp32")
    fmt = torch.channels_last if "_cl" in a.mode else torch.contiguous_format
    amp = torch.bfloat16 if "bf16" in a.mode else torch.float16 if "fp16" in a.mode else None
    dev = torch.device("cuda")
    m = getattr(tvm, a.model)(num_classes=1000).to(dev).to(memory_format=fmt)
    x = torch.randn(a.batch, 3, a.size, a.size, device=dev).contiguous(memory_format=fmt)
    y = torch.randint(0, 1000, (a.batch,), device=dev)
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    crit = nn.CrossEntropyLoss()
    scaler = torch.amp.GradScaler("cuda", enabled=amp == torch.float16)
    fwd = torch.compile(m) if "_compile" in a.mode else m

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=amp or torch.float32, enabled=amp is not None):
            loss = crit(fwd(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    for _ in range(12):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(a.steps):
            step()
        torch.cuda.synchronize()
    ev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    report(f"torch {torch.__version__} cudnn {torch.backends.cudnn.version()} {a.model} batch {a.batch} {a.mode}",
           [(e.name, e.device_time) for e in ev], a.steps, a.rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--mode", default="fp32",
                    help="fp32, tf32, amp_bf16, amp_fp16; suffixes _cl (channels last), _compile")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--rows", type=int, default=25)
    ap.add_argument("--trace", help="a Kineto trace (gpuperf profile's profiler_trace.json) instead of a run")
    a = ap.parse_args()
    from_trace(a) if a.trace else from_torch(a)


if __name__ == "__main__":
    main()
