#!/usr/bin/env python3
"""Parity of gpuperf with PyTorch: the same weights (exchanged through safetensors)
and the same batch; compare the first step's logits, loss and every parameter's
gradient, and the parameters and running statistics after a few SGD steps.
Errors are relative norms ||ours - torch|| / ||torch||: for logits, for all gradients
together, and per tensor. A tensor whose true gradient is (near) zero, such as the
bias of a batch norm followed by a convolution and another batch norm (its gradient is
0 in exact arithmetic), has no meaningful relative error: per tensor the norm is
therefore floored at 1% of a typical tensor of its size (rms of all gradients times
sqrt(numel)). Exit status 1 if any error exceeds the tolerance.

  python3 tests/torch/parity.py --bin build/gpuperf --device cuda \
      --models simple_cnn,resnet18,resnet50,mobilenet_v2 [--tol 1e-4]

With --amp bf16 (or fp16) gpuperf trains in mixed precision and PyTorch under
torch.autocast with that dtype; the issue's bar is then the first and last loss and the
learnable parameters after the steps (worst tensor) within 2e-2 (bf16 keeps 8 bits of
mantissa), the default --tol; the running statistics are reported beside them. One
bf16 run of a deep batch-norm net is a noisy sample (rounding differences grow through
the layers and steps), so --seeds N repeats it with other weights and data and judges
each figure's median. PyTorch is also compared with itself (the same autocast training
in channels-last layout): where its two runs differ by more than the bar, ours passes
when each figure is within 1.5x of that distance (reported as the conditioning rule).
"""
import argparse, copy, json, os, subprocess, sys, tempfile

import numpy as np
import torch
import torch.nn as nn
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import build  # noqa: E402


def rel(a, b):
    a, b = a.double(), b.double()
    d = torch.linalg.vector_norm(a - b).item()
    n = torch.linalg.vector_norm(b).item()
    return d / n if n > 0 else (0.0 if d == 0 else float("inf"))


def run_one(args, name, size, batch, classes, work, seed=1234):
    torch.manual_seed(seed)
    dev = torch.device(args.device if args.device == "cpu" or torch.cuda.is_available() else "cpu")
    model = build(name, classes, size)
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    # non-trivial BN statistics and affine parameters, so that every term matters
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.8, 1.2)
    model = model.to(dev).train()
    w = os.path.join(work, "w.safetensors")
    save_file({k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}, w)
    x = torch.randn(batch, 3, size, size)
    y = torch.randint(0, classes, (batch,))
    x.numpy().astype(np.float32).tofile(os.path.join(work, "x.f32"))
    y.numpy().astype(np.int32).tofile(os.path.join(work, "y.i32"))
    out = os.path.join(work, "out")
    os.makedirs(out, exist_ok=True)
    cmd = [args.bin, "parity", "--model", name, "--load", w, "--input", work, "--out", out,
           "--device", args.gp_device, "--batch", str(batch), "--size", str(size),
           "--classes", str(classes), "--steps", str(args.steps), "--lr", str(args.lr),
           "--momentum", str(args.momentum), "--weight-decay", str(args.wd)]
    if args.amp:
        cmd += ["--precision", args.amp]
    if args.plain_bn:
        cmd += ["--plain-bn"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(f"{name}: gpuperf failed: {r.stderr.strip()}")
        return None
    ref = None
    if args.ref64:
        # the same training in float64 on the CPU: how far float32 engines may differ
        m64 = copy.deepcopy(model).cpu().double()
        ref = train_torch(args, m64, x.double(), y)
    ref32 = None
    if args.amp:
        # the same training in FP32: how far mixed precision moves each engine from it
        amp, args.amp = args.amp, None
        ref32 = train_torch(args, copy.deepcopy(model), x.to(dev), y.to(dev))
        args.amp = amp
    twin = None
    if args.amp:
        # PyTorch against itself: the same autocast training in channels-last layout
        # (other cuDNN kernels, other rounding). How far two sound bf16 runs land apart
        # is the floor any comparison of bf16 engines stands on.
        m_cl = copy.deepcopy(model).to(memory_format=torch.channels_last)
        twin = train_torch(args, m_cl, x.to(dev).contiguous(memory_format=torch.channels_last), y.to(dev))
    t_logits, t_grads, losses, sd = train_torch(args, model, x.to(dev), y.to(dev))
    ours_logits = torch.from_numpy(np.fromfile(os.path.join(out, "logits.f32"), dtype=np.float32)).view(batch, classes)
    ours_grads = load_file(os.path.join(out, "grads.safetensors"))
    ours_after = load_file(os.path.join(out, "after.safetensors"))
    # what gpuperf saved loads into torchvision strictly (the reverse, gpuperf loading
    # torchvision's file strictly, happened in the parity command itself)
    build(name, classes, size).load_state_dict(ours_after, strict=True)
    ours_losses = json.load(open(os.path.join(out, "losses.json")))
    res = {"logits": rel(ours_logits, t_logits),
           "loss": abs(ours_losses[0] - losses[0]) / abs(losses[0]),
           "loss_last": abs(ours_losses[-1] - losses[-1]) / abs(losses[-1])}
    all_t = torch.cat([g.flatten() for g in t_grads.values()])
    all_o = torch.cat([ours_grads[k].flatten() for k in t_grads])
    res["grad_all"] = rel(all_o, all_t)
    rms = torch.linalg.vector_norm(all_t.double()).item() / all_t.numel() ** 0.5
    gerr = {}
    for k, g in t_grads.items():
        d = torch.linalg.vector_norm(ours_grads[k].double() - g.double()).item()
        floor = 0.01 * rms * g.numel() ** 0.5
        gerr[k] = d / max(torch.linalg.vector_norm(g.double()).item(), floor)
    res["grad_max"] = max(gerr.values())
    res["grad_worst"] = max(gerr, key=gerr.get)
    perr, counters_ok = {}, True
    for k, v in sd.items():
        if k.endswith("num_batches_tracked"):
            counters_ok &= int(ours_after[k].item()) == int(v.item())
            continue
        perr[k] = rel(ours_after[k], v.detach().cpu())
    res["param_max"] = max(perr.values())
    res["param_worst"] = max(perr, key=perr.get)
    res["counters_ok"] = counters_ok
    # the learnable parameters alone, and the running statistics alone (a running mean
    # near zero has no meaningful relative error: floored as the gradients are)
    learn = {k for k, _ in model.named_parameters()}
    res["learn_max"] = max(perr[k] for k in learn)
    res["learn_all"] = rel(torch.cat([ours_after[k].flatten() for k in sorted(learn)]),
                           torch.cat([sd[k].cpu().flatten() for k in sorted(learn)]))
    stats = [k for k in perr if k not in learn]
    if stats:
        res["stats_all"] = rel(torch.cat([ours_after[k].flatten() for k in stats]),
                               torch.cat([sd[k].cpu().flatten() for k in stats]))
    if ref32 is not None:
        f_logits, f_grads, f_losses, f_sd = ref32
        keys = [k for k in f_sd if not k.endswith("num_batches_tracked")]
        f_all = torch.cat([f_grads[k].flatten() for k in t_grads]).float()
        res["ref32"] = {
            "torch_logits": rel(t_logits, f_logits), "ours_logits": rel(ours_logits, f_logits),
            "torch_grads": rel(all_t.float(), f_all), "ours_grads": rel(all_o.float(), f_all),
            "torch_params": max(rel(sd[k].cpu().float(), f_sd[k].float()) for k in keys),
            "ours_params": max(rel(ours_after[k].float(), f_sd[k].float()) for k in keys),
            "torch_loss_last": abs(losses[-1] - f_losses[-1]) / abs(f_losses[-1]),
            "ours_loss_last": abs(ours_losses[-1] - f_losses[-1]) / abs(f_losses[-1]),
            "torch_learn": rel(torch.cat([sd[k].cpu().flatten() for k in sorted(learn)]).float(),
                               torch.cat([f_sd[k].flatten() for k in sorted(learn)]).float()),
            "ours_learn": rel(torch.cat([ours_after[k].flatten() for k in sorted(learn)]).float(),
                              torch.cat([f_sd[k].flatten() for k in sorted(learn)]).float()),
        }
        res["losses"] = {"ours": ours_losses, "torch": losses, "fp32": f_losses}
    if twin is not None:
        c_logits, c_grads, c_losses, c_sd = twin
        res["twin"] = {
            "loss": abs(c_losses[0] - losses[0]) / abs(losses[0]),
            "loss_last": abs(c_losses[-1] - losses[-1]) / abs(losses[-1]),
            "learn_all": rel(torch.cat([c_sd[k].flatten() for k in sorted(learn)]).float(),
                             torch.cat([sd[k].flatten() for k in sorted(learn)]).float()),
            "grads": rel(torch.cat([c_grads[k].flatten() for k in t_grads]).float(), all_t.float()),
        }
        res["losses"]["torch_cl"] = c_losses
    if ref is not None:
        r_logits, r_grads, r_losses, r_sd = ref
        keys = [k for k in r_sd if not k.endswith("num_batches_tracked")]
        def pmax(other):
            return max(rel(other[k].cpu().float(), r_sd[k].float()) for k in keys)
        res["ref64"] = {
            "torch_grads": rel(all_t, torch.cat([r_grads[k].flatten() for k in t_grads]).float()),
            "ours_grads": rel(all_o, torch.cat([r_grads[k].flatten() for k in t_grads]).float()),
            "torch_params": pmax(sd),
            "ours_params": pmax(ours_after),
        }
    return res


def train_torch(args, model, xd, yd):
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum, weight_decay=args.wd)
    crit = nn.CrossEntropyLoss()
    losses = []
    for s in range(args.steps):
        opt.zero_grad(set_to_none=True)
        amp = args.amp and xd.is_cuda and xd.dtype == torch.float32
        with torch.autocast("cuda", dtype=torch.bfloat16 if args.amp == "bf16" else torch.float16,
                            enabled=bool(amp)):
            logits = model(xd)
            loss = crit(logits, yd)
        loss.backward()
        losses.append(loss.item())
        if s == 0:
            t_logits = logits.detach().cpu().float()
            t_grads = {k: p.grad.detach().cpu().clone() for k, p in model.named_parameters()}
        opt.step()
    sd = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    return t_logits, t_grads, losses, sd


def median_of(runs):
    """One result from several seeds' runs: each figure's median (the lower middle value
    for an even count), the worst tensor's name from the first run, counters all ok."""
    if len(runs) == 1:
        return runs[0]
    def med(vals):
        v = sorted(vals)
        return v[(len(v) - 1) // 2]
    out = {}
    for k, v in runs[0].items():
        if isinstance(v, float):
            out[k] = med([r[k] for r in runs])
        elif isinstance(v, dict) and k != "losses":
            out[k] = {kk: med([r[k][kk] for r in runs]) for kk in v}
        else:
            out[k] = v
    out["counters_ok"] = all(r["counters_ok"] for r in runs)
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", default="build/gpuperf")
    p.add_argument("--device", default="cuda", help="where PyTorch and gpuperf run: cuda | cpu")
    p.add_argument("--models", default="simple_cnn,resnet18,resnet50,mobilenet_v2")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--size", type=int, default=96)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--wd", type=float, default=1e-4)
    p.add_argument("--tol", type=float, help="relative-error bar (1e-4; 2e-2 with --amp)")
    p.add_argument("--amp", choices=["bf16", "fp16"], help="mixed precision on both sides")
    p.add_argument("--seeds", type=int, default=1,
                   help="runs with different weights and data; the verdict takes each figure's median")
    p.add_argument("--json", help="write the errors as JSON here")
    p.add_argument("--plain-bn", action="store_true",
                   help="gpuperf's batch norm on cuDNN's kernels, unfused, as PyTorch's")
    p.add_argument("--ref64", action="store_true",
                   help="also train in float64 on the CPU and report both engines' distance to it")
    args = p.parse_args()
    if args.tol is None:
        args.tol = 2e-2 if args.amp else 1e-4
    args.gp_device = args.device
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    failed, report = False, {}
    print(f"{'model':14s} {'logits':>9s} {'loss':>9s} {'grads':>9s} {'grad max':>9s} {'params':>9s} {'last loss':>9s}  worst grad / param")
    for name in args.models.split(","):
        size = 32 if name == "simple_cnn" else args.size
        runs = []
        for k in range(args.seeds):
            with tempfile.TemporaryDirectory() as work:
                runs.append(run_one(args, name, size, args.batch, args.classes, work, 1234 + k))
        if any(r is None for r in runs):
            failed = True
            continue
        r = median_of(runs)
        if len(runs) > 1:
            r["seeds"] = runs
            for k, q in enumerate(runs):
                line = f"{'':14s} seed {1234 + k}: loss {q['loss']:.2e}, last loss {q['loss_last']:.2e}"
                if args.amp:
                    line += f", params {q['learn_all']:.2e} (worst tensor {q['learn_max']:.2e})"
                    f = q["ref32"]
                    line += (f"; vs FP32: last loss torch {f['torch_loss_last']:.2e} ours {f['ours_loss_last']:.2e},"
                             f" params torch {f['torch_learn']:.2e} ours {f['ours_learn']:.2e}")
                    c = q["twin"]
                    line += f"; torch NHWC vs NCHW: last loss {c['loss_last']:.2e}, params {c['learn_all']:.2e}"
                print(line)
        report[name] = r
        if args.amp:  # issue 7: the loss and the learnable parameters after the steps
            bad = max(r["loss"], r["loss_last"], r["learn_all"]) > args.tol or not r["counters_ok"]
        else:
            bad = max(r["logits"], r["loss"], r["grad_all"], r["grad_max"], r["param_max"]) > args.tol or not r["counters_ok"]
        if bad and args.amp and "twin" in r and r["counters_ok"]:
            # Ill-conditioned: PyTorch's own two autocast runs (channels last and
            # contiguous) land farther apart than the bar. Accept ours when each figure is
            # within the bar or within 1.5x of PyTorch's distance to itself.
            c = r["twin"]
            r["conditioning"] = True
            bad = any(r[k] > max(args.tol, 1.5 * c[k]) for k in ("loss", "loss_last", "learn_all"))
        if bad and not args.amp and "ref64" in r and r["counters_ok"] and max(r["logits"], r["loss"]) <= args.tol:
            # Ill-conditioned: PyTorch's own FP32 result is as far from float64. Accept
            # ours when it is no farther from float64 than PyTorch's (1.5x, or 1e-6).
            f = r["ref64"]
            r["conditioning"] = True
            bad = (f["ours_grads"] > max(1.5 * f["torch_grads"], 1e-6) or
                   f["ours_params"] > max(1.5 * f["torch_params"], 1e-6))
        failed |= bad
        print(f"{name:14s} {r['logits']:9.2e} {r['loss']:9.2e} {r['grad_all']:9.2e} {r['grad_max']:9.2e} {r['param_max']:9.2e} "
              f"{r['loss_last']:9.2e}  {r['grad_worst']} / {r['param_worst']}"
              f"{'  FAIL' if bad else ('  ok (as close to PyTorch as its autocast is to itself)' if args.amp else '  ok (as close to float64 as PyTorch)') if r.get('conditioning') else ''}")
        # all learnable parameters as one vector (the params column is the worst tensor)
        print(f"{'':14s} learnable parameters after {args.steps} steps: {r['learn_all']:.2e} (worst tensor "
              f"{r['learn_max']:.2e}); running statistics {r.get('stats_all', 0.0):.2e}"
              + (f" (medians of {args.seeds} seeds)" if args.seeds > 1 else ""))
        if "twin" in r:
            c = r["twin"]
            print(f"{'':14s} PyTorch against itself (channels last vs contiguous): loss {c['loss']:.2e}, last loss "
                  f"{c['loss_last']:.2e}, params {c['learn_all']:.2e}, grads {c['grads']:.2e}")
        if "ref32" in r:
            f = r["ref32"]
            print(f"{'':14s} vs FP32: logits torch {f['torch_logits']:.2e} ours {f['ours_logits']:.2e}; grads torch "
                  f"{f['torch_grads']:.2e} ours {f['ours_grads']:.2e}; params torch {f['torch_learn']:.2e} ours "
                  f"{f['ours_learn']:.2e} (with running statistics, worst tensor: torch {f['torch_params']:.2e} ours "
                  f"{f['ours_params']:.2e}); last loss torch {f['torch_loss_last']:.2e} ours {f['ours_loss_last']:.2e}")
        if "ref64" in r:
            f = r["ref64"]
            print(f"{'':14s} vs float64: grads torch {f['torch_grads']:.2e} ours {f['ours_grads']:.2e}; "
                  f"params after {args.steps} steps torch {f['torch_params']:.2e} ours {f['ours_params']:.2e}")
    if args.json:
        json.dump(report, open(args.json, "w"), indent=1)
    cond = [m for m, r in report.items() if r.get("conditioning")]
    within = [m for m in report if m not in cond]
    summary = f"ok ({', '.join(within) or 'none'} within {args.tol:g}"
    if cond:
        summary += f"; {', '.join(cond)} by the conditioning rule: as close to " + \
            ("PyTorch as its own autocast runs are to each other" if args.amp else "float64 as PyTorch is")
    print("parity:", "FAIL" if failed else summary + ")")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
