"""How far two kernel paths of the same config round apart, against an honest edit: the numbers
docs/reproduce.md quotes for why attnlab-reproduce uses no tolerance.

    python -m benchmarks.rounding            # ~10 s: this machine's kernels here, DEFAULT in a child

For the tutorial's §5 training (201 steps) at seeds 42, 1, 2, 3 and 1, 2 heads it prints, per
config: the first step where the losses of this machine's kernels and torch's portable DEFAULT
kernels differ, the largest loss difference between them (the rounding "envelope"), the largest
loss difference a learning rate changed from 0.05 to 0.0505 makes on this machine's kernels, the
ratio of the two, and what a 0.1 % edit of the loss at step 100 changes. Envelopes spanning orders
of magnitude mean no fixed tolerance fits every run; a one-loss edit below its run's envelope means
no envelope-based margin can see it. The last two columns test the rule "rounding grows smoothly, an
edit stands alone at one step": the largest ratio of one step's rounding difference to its
neighbours', and the same ratio at step 100 for the DEFAULT run with that loss edited.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

SEEDS, HEADS = (42, 1, 2, 3), (1, 2)


def spike(d: np.ndarray) -> float:
    """The largest ratio of a step's absolute difference to the larger of its two neighbours' (inf: a step
    that differs while both neighbours agree bit for bit): how much a difference can stand alone."""
    d = np.abs(d)
    ratios = [d[t] / max(d[t - 1], d[t + 1]) if max(d[t - 1], d[t + 1]) else (np.inf if d[t] else 0.0)
              for t in range(1, len(d) - 1)]
    return float(max(ratios))


def losses(lr: float) -> dict[str, list[float]]:
    """Each config's 201 losses with this process's kernels, as ``{"seed,heads": losses}``."""
    from attnlab.commands.api import compose, train

    out = {}
    for seed in SEEDS:
        for heads in HEADS:
            cfg = compose(f"seed={seed}", f"model.n_heads={heads}", f"optimizer.lr={lr}", "logging=off")
            out[f"{seed},{heads}"] = train(cfg).losses.tolist()
    return out


def main() -> int:
    if sys.argv[1:] == ["--child"]:
        print(json.dumps(losses(0.05)))
        return 0
    child = subprocess.run([sys.executable, "-m", "benchmarks.rounding", "--child"], capture_output=True, text=True,
                           env={**os.environ, "ATEN_CPU_CAPABILITY": "default"}, check=True)
    import torch

    default, here, edited = json.loads(child.stdout.splitlines()[-1]), losses(0.05), losses(0.0505)
    print(f"torch {torch.__version__}, this machine's kernels {torch.backends.cpu.get_cpu_capability()} vs DEFAULT "
          f"(ATEN_CPU_CAPABILITY=default), tutorial §5, 201 steps")
    print("| seed | heads | rounding from step | rounding envelope (max abs loss diff) | lr 0.05 -> 0.0505 | "
          "edit / envelope | 0.1 % of the loss at step 100 | rounding's largest lone step | that edit's step |\n"
          "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for key in here:
        a, b, c = (np.array(x[key]) for x in (here, default, edited))
        diff = np.abs(a - b)
        first = int(np.flatnonzero(diff)[0]) if diff.any() else None
        envelope, edit = float(diff.max()), float(np.abs(c - a).max())
        ratio = f"{edit / envelope:.3g}" if envelope else "-"
        seed, heads = key.split(",")
        other = b.copy()
        other[100] *= 1.001  # the DEFAULT run with its step-100 loss raised by 0.1 %, against this machine's
        d = np.abs(other - a)
        alone = d[100] / max(d[99], d[101]) if max(d[99], d[101]) else np.inf
        print(f"| {seed} | {heads} | {first if first is not None else 'identical'} | {envelope:.3g} | {edit:.3g} | "
              f"{ratio} | {a[100] * 1e-3:.3g} | {spike(a - b):.3g} | {alone:.3g} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
