#!/usr/bin/env python3
"""Checks of tests/torch/tta.py that need no torch (run by tests/test_tta.c):
lr_at, the schedule the PyTorch side must share with gpuperf, against the values
torch.optim.lr_scheduler produced (tests/data/lr_reference.json, the cosine cases),
step by step to 1e-7 as tests/test_schedule.c holds gpuperf to."""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tta  # noqa: E402


def main():
    with open(os.path.join(HERE, "..", "data", "lr_reference.json")) as f:
        ref = json.load(f)
    cases = [c for c in ref["cases"] if c["schedule"] == "cosine"]
    if len(cases) < 3:
        sys.exit(f"lr_reference.json: {len(cases)} cosine cases, expected 3")
    worst = 0.0
    for c in cases:
        spe = c["steps_per_epoch"]
        for step, want in enumerate(c["lr_values"]):
            got = tta.lr_at(step // spe, c["lr"], c["epochs"], c["warmup_epochs"],
                            c["warmup_factor"])
            err = abs(got - want)
            worst = max(worst, err)
            if err > 1e-7:
                sys.exit(f"{c['name']} step {step}: lr_at {got!r}, torch {want!r}")
    print(f"lr_at matches {len(cases)} cosine cases of {ref['steps']} steps (worst {worst:.2e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
