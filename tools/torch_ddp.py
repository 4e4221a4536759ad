#!/usr/bin/env python3
"""PyTorch DDP yardstick beside `gpuperf scale`: torchvision model training img/s on N GPUs,
one process per GPU (torchrun), synthetic data on the GPU, SGD momentum 0.9, as gpuperf's
`train` runs it.

    NCCL_NVLS_ENABLE=0 torchrun --nproc_per_node=N tools/torch_ddp.py \
        [--model resnet50] [--precision fp32|tf32|fp16|bf16] [--batch 256] [--steps 60] \
        [--warmup 10] [--size 224] [--bucket-mb 25] [--sync-bn]

`gpuperf scale --torch` runs it after each GPU count with scale's own settings (--steps
are the timed steps there, --warmup the untimed ones before them, as train counts them).

fp16/bf16 run under autocast in channels-last (as gpuperf's NHWC 16-bit path); fp16 with a
GradScaler. Rank 0 prints one JSON line: img/s in total and per GPU, ms per step, and the
peak memory PyTorch's allocator reserved on rank 0.
"""
import argparse
import json
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torchvision.models as tvm

ap = argparse.ArgumentParser()
ap.add_argument("--model", default="resnet50")
ap.add_argument("--precision", default="bf16", choices=["fp32", "tf32", "fp16", "bf16"])
ap.add_argument("--batch", type=int, default=256)
ap.add_argument("--steps", type=int, default=60)
ap.add_argument("--warmup", type=int, default=10)
ap.add_argument("--size", type=int, default=224, help="image side in pixels")
ap.add_argument("--bucket-mb", type=int, default=25, help="DDP's bucket_cap_mb")
ap.add_argument("--sync-bn", action="store_true")
a = ap.parse_args()

dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
local = rank % torch.cuda.device_count()
torch.cuda.set_device(local)
torch.backends.cudnn.benchmark = True
tf32 = a.precision != "fp32"
torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
half = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(a.precision)
fmt = torch.channels_last if half else torch.contiguous_format
m = getattr(tvm, a.model)()
if a.sync_bn:
    m = nn.SyncBatchNorm.convert_sync_batchnorm(m)
m = m.cuda().to(memory_format=fmt)
m = nn.parallel.DistributedDataParallel(m, device_ids=[local], bucket_cap_mb=a.bucket_mb)
x = torch.randn(a.batch, 3, a.size, a.size, device="cuda").contiguous(memory_format=fmt)
y = torch.randint(0, 1000, (a.batch,), device="cuda")
opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
crit = nn.CrossEntropyLoss()
scaler = torch.amp.GradScaler("cuda", enabled=a.precision == "fp16")


def step():
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=half or torch.float32, enabled=half is not None):
        loss = crit(m(x), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()


for _ in range(a.warmup):
    step()
torch.cuda.synchronize()
dist.barrier()
t = time.time()
for _ in range(a.steps):
    step()
torch.cuda.synchronize()
dist.barrier()
s = time.time() - t
if rank == 0:
    print(json.dumps(dict(tool="pytorch-ddp", torch=torch.__version__, model=a.model,
                          precision=a.precision, world=world, batch_per_gpu=a.batch,
                          ms_per_step=round(1e3 * s / a.steps, 3),
                          img_s_total=round(a.steps * a.batch * world / s, 1),
                          img_s_per_gpu=round(a.steps * a.batch / s, 1),
                          peak_reserved_mib=round(torch.cuda.max_memory_reserved() / 2**20))),
          flush=True)
dist.destroy_process_group()
