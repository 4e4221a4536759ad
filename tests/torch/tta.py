#!/usr/bin/env python3
"""PyTorch's side of the time-to-accuracy recipe (docs/training.md): the training
`gpuperf train --data DIR --epochs E` runs, written the way a torchvision user would.

  python3 tests/torch/tta.py --data DIR --out RUN_DIR [--epochs 16 --batch 256 --size 128
      --lr 0.2 --warmup-epochs 2 --label-smoothing 0.1 --weight-decay 5e-5 --seed 1
      --workers 16 --precision bf16 --device cuda]

DIR/train and DIR/val are ImageFolders. Train: RandomResizedCrop(size) (scale 0.08..1),
RandomHorizontalFlip, ToTensor, Normalize (ImageNet); val: Resize(size * 256 // 224),
CenterCrop(size). The train loader shuffles and drops its last partial batch (as gpuperf
does). resnet18(num_classes=K), SGD (momentum 0.9, no Nesterov, L2 weight decay),
CrossEntropyLoss(label_smoothing) for training and validation (torchvision's
references/classification/train.py uses one criterion for both). The learning rate is
gpuperf's --lr-schedule cosine with --warmup-epochs: torch.optim.lr_scheduler's
SequentialLR([LinearLR(start_factor, total_iters=W), CosineAnnealingLR(T_max=E-W)],
milestones=[W]) stepped once per epoch, the construct tests/data/lr_reference.json holds
and src/train/schedule.c matches to 1e-7; lr_at() below is the same formula in Python,
checked against that file by tests/torch/test_tta.py and against the scheduler every
epoch here. bf16: torch.autocast(bfloat16) with the model and batches in channels_last;
cudnn.benchmark on. The whole history goes to RUN_DIR/train.json in the schema gpuperf's
train.json uses (docs/results.md): time_s is wall time since the run began (after the
imports: model build, data loading and validation included) at the end of each epoch.

Runs on the CPU too (--device cpu --precision fp32, tiny data) to check it quickly.
"""
import argparse
import datetime
import json
import math
import os
import platform
import sys
import tempfile
import time


def lr_at(epoch, lr, epochs, warmup_epochs=0, warmup_factor=0.01):
    """gpuperf's cosine schedule with linear warmup for a step in epoch (from 0): the
    per-epoch LinearLR then CosineAnnealingLR(T_max=epochs-W, eta_min=0)."""
    w = warmup_epochs
    if epoch < w:
        return lr * (warmup_factor + (1.0 - warmup_factor) * epoch / w)
    return lr * (1 + math.cos(math.pi * (epoch - w) / (epochs - w))) / 2


def write_json_atomic(doc, path):
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".train.")
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True, help="folder with train/ and val/ ImageFolders")
    p.add_argument("--out", required=True, help="folder for train.json")
    p.add_argument("--model", default="resnet18")
    p.add_argument("--epochs", type=int, default=16)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--size", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.2)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=5e-5)
    p.add_argument("--warmup-epochs", type=int, default=2)
    p.add_argument("--warmup-factor", type=float, default=0.01)
    p.add_argument("--label-smoothing", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workers", type=int, default=16)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    a = p.parse_args(argv)
    if a.epochs < 1 or a.batch < 1 or a.size < 8 or not a.lr > 0:
        p.error("--epochs, --batch, --size and --lr must be positive (--size at least 8)")
    if a.warmup_epochs < 0 or a.warmup_epochs >= a.epochs:
        p.error(f"--warmup-epochs {a.warmup_epochs} must be in [0, --epochs)")
    for split in ("train", "val"):
        if not os.path.isdir(os.path.join(a.data, split)):
            p.error(f"--data {a.data}: no {split}/ folder (make one with "
                    "`gpuperf dataset make --val-fraction F`)")
    return a


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    import random

    import numpy as np
    import torch
    import torch.nn as nn
    import torchvision
    import torchvision.transforms as T
    from torch.utils.data import DataLoader
    from torchvision.datasets import ImageFolder

    # "the run began": everything after the imports counts (CUDA's start, the model,
    # the loaders, every epoch and its validation); import torch does not
    t0 = time.perf_counter()
    started = utc_now()
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("tta.py: --device cuda but torch sees no GPU (use --device cpu)")
    dev = torch.device(a.device)
    random.seed(a.seed)
    np.random.seed(a.seed)
    torch.manual_seed(a.seed)
    torch.backends.cudnn.benchmark = True
    bf16 = a.precision == "bf16"
    mem = torch.channels_last if bf16 else torch.contiguous_format

    norm = T.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    train_tf = T.Compose([T.RandomResizedCrop(a.size), T.RandomHorizontalFlip(), T.ToTensor(), norm])
    val_tf = T.Compose([T.Resize(a.size * 256 // 224), T.CenterCrop(a.size), T.ToTensor(), norm])
    train_ds = ImageFolder(os.path.join(a.data, "train"), train_tf)
    val_ds = ImageFolder(os.path.join(a.data, "val"), val_tf)
    if train_ds.classes != val_ds.classes:
        sys.exit("tta.py: train/ and val/ hold different classes")
    if len(train_ds) < a.batch:
        sys.exit(f"tta.py: {len(train_ds)} training images are fewer than one batch of {a.batch}")
    classes = len(train_ds.classes)
    pin = a.device == "cuda"
    gen = torch.Generator().manual_seed(a.seed)
    train_dl = DataLoader(train_ds, batch_size=a.batch, shuffle=True, drop_last=True,
                          num_workers=a.workers, pin_memory=pin, generator=gen,
                          persistent_workers=a.workers > 0)
    val_dl = DataLoader(val_ds, batch_size=a.batch, shuffle=False, num_workers=a.workers,
                        pin_memory=pin, persistent_workers=a.workers > 0)

    model = getattr(torchvision.models, a.model)(num_classes=classes).to(dev, memory_format=mem)
    crit = nn.CrossEntropyLoss(label_smoothing=a.label_smoothing)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum,
                          weight_decay=a.weight_decay, nesterov=False)
    S = torch.optim.lr_scheduler
    cos = S.CosineAnnealingLR(opt, T_max=a.epochs - a.warmup_epochs, eta_min=0.0)
    if a.warmup_epochs:
        warm = S.LinearLR(opt, start_factor=a.warmup_factor, end_factor=1.0,
                          total_iters=a.warmup_epochs)
        sched = S.SequentialLR(opt, schedulers=[warm, cos], milestones=[a.warmup_epochs])
    else:
        sched = cos

    def autocast():
        return torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=bf16)

    def to_dev(x, y):
        return (x.to(dev, non_blocking=True, memory_format=mem), y.to(dev, non_blocking=True))

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def evaluate():
        model.eval()
        loss_sum = torch.zeros((), device=dev, dtype=torch.float64)
        top1 = torch.zeros((), device=dev, dtype=torch.int64)
        top5 = torch.zeros((), device=dev, dtype=torch.int64)
        n = 0
        sync()
        tv = time.perf_counter()
        with torch.no_grad():
            for x, y in val_dl:
                x, y = to_dev(x, y)
                with autocast():
                    out = model(x)
                    loss = crit(out, y)
                loss_sum += loss.double() * y.numel()
                k = min(5, classes)
                pred = out.float().topk(k, dim=1).indices
                hit = pred.eq(y[:, None])
                top1 += hit[:, 0].sum()
                top5 += hit.any(dim=1).sum()
                n += y.numel()
        sync()
        dt = time.perf_counter() - tv
        model.train()
        return (loss_sum.item() / n, 100.0 * top1.item() / n, 100.0 * top5.item() / n, n / dt)

    history, step = [], 0
    model.train()
    for epoch in range(a.epochs):
        lr = opt.param_groups[0]["lr"]
        want = lr_at(epoch, a.lr, a.epochs, a.warmup_epochs, a.warmup_factor)
        if abs(lr - want) > 1e-7 * a.lr:
            sys.exit(f"tta.py: epoch {epoch}: torch's scheduler gives lr {lr}, gpuperf's "
                     f"formula {want}: the recipes would differ")
        loss_sum = torch.zeros((), device=dev, dtype=torch.float64)
        correct = torch.zeros((), device=dev, dtype=torch.int64)
        seen, wait = 0, 0.0
        sync()
        te = time.perf_counter()
        it = iter(train_dl)
        while True:
            tw = time.perf_counter()
            try:
                x, y = next(it)
            except StopIteration:
                break
            wait += time.perf_counter() - tw
            x, y = to_dev(x, y)
            with autocast():
                out = model(x)
                loss = crit(out, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            loss_sum += loss.detach().double() * y.numel()
            correct += out.detach().argmax(1).eq(y).sum()
            seen += y.numel()
        sync()
        train_s = time.perf_counter() - te
        sched.step()
        vloss, vtop1, vtop5, vimg = evaluate()
        rec = {
            "epoch": epoch + 1, "step": step, "time_s": time.perf_counter() - t0, "lr": lr,
            "train_loss": loss_sum.item() / seen, "train_top1": 100.0 * correct.item() / seen,
            "val_loss": vloss, "val_top1": vtop1, "val_top5": vtop5, "val_img_s": vimg,
            "img_s": seen / train_s, "data_wait_pct": 100.0 * wait / train_s,
        }
        history.append(rec)
        print(f"epoch {epoch + 1:3d}/{a.epochs}  lr {lr:.4g}  train loss {rec['train_loss']:.4f} "
              f"top-1 {rec['train_top1']:5.1f}%  val loss {vloss:.4f} top-1 {vtop1:5.1f}% "
              f"top-5 {vtop5:5.1f}%  {rec['img_s']:7.0f} img/s  data wait "
              f"{rec['data_wait_pct']:4.1f}%  {rec['time_s']:6.1f} s", flush=True)

    wall = time.perf_counter() - t0
    gpu = None
    if dev.type == "cuda":
        gpu = {"name": torch.cuda.get_device_name(dev), "cuda_runtime": torch.version.cuda,
               "cudnn": torch.backends.cudnn.version()}
    doc = {
        "schema": "gpuperf.result/1",
        "gpuperf_version": None,
        "command": "train",
        "engine": "pytorch",
        "argv": ["tests/torch/tta.py"] + list(sys.argv[1:] if argv is None else argv),
        "started_utc": started,
        "finished_utc": utc_now(),
        "host": {"hostname": platform.node(), "cpus": os.cpu_count()},
        "gpu": gpu,
        "settings": {
            "model": a.model, "device": a.device, "precision": a.precision,
            "layout": "nhwc" if bf16 else "nchw", "batch": a.batch, "size": a.size,
            "classes": classes, "epochs": a.epochs, "data": a.data, "workers": a.workers,
            "seed": a.seed, "train_images": len(train_ds), "val_images": len(val_ds),
            # the recipe in gpuperf's train.json keys, so that charts and summaries
            # compare like with like; torchvision decodes with PIL in the workers
            "decode": "cpu", "optimizer": "sgd", "lr": a.lr, "momentum": a.momentum,
            "weight_decay": a.weight_decay, "nesterov": False,
            "lr_schedule": "cosine", "warmup_epochs": a.warmup_epochs,
            "warmup_factor": a.warmup_factor, "lr_schedule_per": "epoch",
            "label_smoothing": a.label_smoothing,
            "torch": torch.__version__, "torchvision": torchvision.__version__,
        },
        "measurements": {"wall_s": wall, "steps": step,
                         "img_s": sum(h["img_s"] for h in history) / len(history)},
        "history": history,
        "best_val_top1": max(h["val_top1"] for h in history),
        "final_val_top1": history[-1]["val_top1"],
    }
    path = os.path.join(a.out, "train.json")
    write_json_atomic(doc, path)
    print(f"wrote {path}: final val top-1 {doc['final_val_top1']:.2f}% in {wall:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
