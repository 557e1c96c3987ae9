"""The trained outcomes the READMEs state over seeds and kernels, measured on this machine: the counts
behind "usually 好 (31 of 33)" and "6 of 30 above 0.9 (5 with DEFAULT kernels)".

    python -m benchmarks.lessons                 # all three kernel settings, ~10 minutes on 2 cores
    python -m benchmarks.lessons --kernels default --what seeds

Each kernel setting runs in a child process with ``ATEN_CPU_CAPABILITY`` set before torch loads
(``native`` leaves it unset: this CPU's best kernels), one torch thread. Per setting it prints
- ``gpt``: `experiment=gpt` at seeds 42 and 1-10, the characters each run continues 今天天气真 with;
- ``seeds``: the §5 training at seeds 1-30, how many end with ' journey' giving one key more than 0.9.
A test cannot afford these 100 runs per kernel setting; tests/test_gpt.py and tests/test_focus.py
assert what holds on every setting (a whole character of the training text; seeds 1-5's ends).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

KERNELS = ("native", "avx2", "default")
GPT_SEEDS = (42, *range(1, 11))
FOCUS_SEEDS = range(1, 31)


def measure(what: str) -> list[dict]:
    """In this process (its kernels): one record per run of ``what`` (``gpt`` or ``seeds``)."""
    import torch

    from attnlab.commands.api import compose, train
    from attnlab.core.focus import target
    from attnlab.core.records import head_mean

    torch.set_num_threads(1)
    quiet = ("logging=off", "logging.console=false", "threads=1")
    out = []
    if what == "gpt":
        for seed in GPT_SEEDS:
            run = train(compose("experiment=gpt", *quiet, f"seed={seed}"))
            out.append({"seed": seed, "text": run.generation["text"]})
    else:
        for seed in FOCUS_SEEDS:
            run = train(compose(*quiet, f"seed={seed}"))
            to, weight = target(head_mean(run.snapshots[-1].weights)[1], run.tokens)
            out.append({"seed": seed, "target": str(to), "weight": float(weight)})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", nargs="+", choices=KERNELS, default=list(KERNELS))
    parser.add_argument("--what", nargs="+", choices=("gpt", "seeds"), default=["gpt", "seeds"])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child), ensure_ascii=False))
        return 0
    good = total = 0
    for kernels in args.kernels:
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        env.pop("ATEN_CPU_CAPABILITY", None)
        if kernels != "native":
            env["ATEN_CPU_CAPABILITY"] = kernels
        for what in args.what:
            proc = subprocess.run([sys.executable, "-m", "benchmarks.lessons", "--child", what],
                                  capture_output=True, text=True, env=env, check=True)
            rows = json.loads(proc.stdout.splitlines()[-1])
            if what == "gpt":
                texts = [r["text"] for r in rows]
                good += sum(t == "好" for t in texts)
                total += len(texts)
                print(f"{kernels:8s} gpt    seeds 42,1-10: " + " ".join(f"{r['seed']}:{r['text']}" for r in rows))
            else:
                above = [r["seed"] for r in rows if r["weight"] > 0.9]
                print(f"{kernels:8s} seeds  1-30: {len(above)} of {len(rows)} above 0.9 (seeds {above})")
    if total:
        print(f"好 in {good} of {total} gpt runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
