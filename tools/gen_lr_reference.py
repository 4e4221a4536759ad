#!/usr/bin/env python3
"""Write the learning rates torch.optim.lr_scheduler gives, step by step, for the
schedules `gpuperf train --lr-schedule` offers (src/train/schedule.h says which torch
construct each one is): tests/test_schedule.c compares the engine with them to 1e-7.

    python3 tools/gen_lr_reference.py tests/data/lr_reference.json

Needs torch (run it where torch is, commit the JSON). Each case runs the loop a
training script runs: per iteration, read the optimizer's lr (and momentum or beta1),
take an optimizer step, and step OneCycleLR; per-epoch schedulers step after each
epoch, as torchvision's references/classification/train.py does.
"""
import json
import math
import os
import sys
import tempfile
import warnings

import torch

STEPS = 1000  # values per case


def build(case, opt):
    """The scheduler a case names, over the optimizer."""
    sched, lr = case["schedule"], case["lr"]
    w, f = case["warmup_epochs"], case["warmup_factor"]
    epochs, spe = case["epochs"], case["steps_per_epoch"]
    S = torch.optim.lr_scheduler
    if sched == "onecycle":
        return S.OneCycleLR(opt, max_lr=lr, epochs=epochs, steps_per_epoch=spe)
    main = None
    if sched == "step":
        main = S.StepLR(opt, step_size=case["lr_step"], gamma=case["lr_gamma"])
    elif sched == "cosine":
        main = S.CosineAnnealingLR(opt, T_max=epochs - w, eta_min=0.0)
    if not w:
        return main  # None: constant
    warm = S.LinearLR(opt, start_factor=f, end_factor=1.0, total_iters=w)
    if main is None:
        return warm
    return S.SequentialLR(opt, schedulers=[warm, main], milestones=[w])


def run(case):
    p = torch.nn.Parameter(torch.zeros(4, dtype=torch.float64))
    if case["optimizer"] == "adamw":
        opt = torch.optim.AdamW([p], lr=case["lr"])
    else:
        opt = torch.optim.SGD([p], lr=case["lr"], momentum=0.9)
    sched = build(case, opt)
    per_iter = case["schedule"] == "onecycle"
    lrs, moms = [], []
    spe = case["steps_per_epoch"]
    for it in range(STEPS):
        g = opt.param_groups[0]
        lrs.append(float(g["lr"]))
        moms.append(float(g["betas"][0] if "betas" in g else g["momentum"]))
        p.grad = torch.full_like(p, 0.5)
        opt.step()
        if sched is not None and (per_iter or (it + 1) % spe == 0):
            sched.step()
    for v in lrs + moms:
        if not math.isfinite(v):
            sys.exit(f"{case['name']}: torch gave a non-finite value")
    case = dict(case)
    case["lr_values"] = lrs
    case["momentum_values"] = moms if per_iter else None
    return case


def cases():
    base = dict(optimizer="sgd", lr=0.1, warmup_epochs=0, warmup_factor=0.01, lr_step=0,
                lr_gamma=0.1, steps_per_epoch=10, epochs=100)
    out = []

    def add(name, **kw):
        c = dict(base, name=name)
        c.update(kw)
        out.append(c)

    add("constant", schedule="constant")
    add("constant_warmup5", schedule="constant", warmup_epochs=5)
    add("step30", schedule="step", lr_step=30)
    add("step30_warmup5", schedule="step", lr_step=30, warmup_epochs=5)
    add("step7_gamma0.5_spe3", schedule="step", lr_step=7, lr_gamma=0.5, steps_per_epoch=3,
        epochs=334)
    add("cosine", schedule="cosine")
    add("cosine_warmup5", schedule="cosine", warmup_epochs=5)
    add("cosine_warmup3_factor0.1_spe7", schedule="cosine", warmup_epochs=3, warmup_factor=0.1,
        steps_per_epoch=7, epochs=143)
    add("onecycle", schedule="onecycle")
    add("onecycle_adamw", schedule="onecycle", optimizer="adamw", lr=0.003)
    add("onecycle_spe7", schedule="onecycle", steps_per_epoch=7, epochs=200)
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: gen_lr_reference.py OUT.json")
    warnings.simplefilter("ignore")  # SequentialLR's step(0) deprecation notice
    doc = {
        "generator": "tools/gen_lr_reference.py",
        "torch": torch.__version__,
        "steps": STEPS,
        "cases": [run(c) for c in cases()],
    }
    out = sys.argv[1]
    d = os.path.dirname(os.path.abspath(out))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".lr_reference.")
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, out)
    print(f"wrote {out}: {len(doc['cases'])} cases of {STEPS} steps (torch {torch.__version__})")


if __name__ == "__main__":
    main()
