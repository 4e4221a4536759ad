#!/usr/bin/env python3
"""Where PyTorch's training step spends GPU time, to set beside `gpuperf profile`'s
"top kernels by GPU time": the same step as ../shared/bench/torch_baseline.py (synthetic
batch on the GPU, SGD momentum 0.9, cudnn.benchmark), profiled for a few steps.

  python3 tools/torch_profile.py --model resnet50 --batch 256 --mode fp32 [--steps 5]
"""
import argparse

import torch
import torch.nn as nn
import torchvision.models as tvm
from torch.profiler import ProfilerActivity, profile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--mode", default="fp32", help="fp32, tf32, amp_bf16, amp_bf16_cl, amp_fp16")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--rows", type=int, default=25)
    a = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = a.mode != "fp32"
    torch.backends.cudnn.allow_tf32 = a.mode != "fp32"
    fmt = torch.channels_last if "_cl" in a.mode else torch.contiguous_format
    amp = torch.bfloat16 if "bf16" in a.mode else torch.float16 if "fp16" in a.mode else None
    dev = torch.device("cuda")
    m = getattr(tvm, a.model)(num_classes=1000).to(dev).to(memory_format=fmt)
    x = torch.randn(a.batch, 3, a.size, a.size, device=dev).contiguous(memory_format=fmt)
    y = torch.randint(0, 1000, (a.batch,), device=dev)
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    crit = nn.CrossEntropyLoss()
    scaler = torch.amp.GradScaler("cuda", enabled=amp == torch.float16)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=amp or torch.float32, enabled=amp is not None):
            loss = crit(m(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    for _ in range(8):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(a.steps):
            step()
        torch.cuda.synchronize()
    ev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    total = sum(e.device_time for e in ev) / 1e3 / a.steps
    print(f"torch {torch.__version__} cudnn {torch.backends.cudnn.version()} {a.model} "
          f"batch {a.batch} {a.mode}: kernel time {total:.3f} ms per step, "
          f"{len(ev) / a.steps:.0f} kernels per step")
    by = {}
    for e in ev:
        t = by.setdefault(e.name, [0, 0.0])
        t[0] += 1
        t[1] += e.device_time / 1e3
    print(f"  {'kernel':90s} {'count':>6s} {'ms/step':>9s}")
    for name, (n, ms) in sorted(by.items(), key=lambda kv: -kv[1][1])[:a.rows]:
        print(f"  {name[:90]:90s} {n // a.steps:6d} {ms / a.steps:9.3f}")


if __name__ == "__main__":
    main()
