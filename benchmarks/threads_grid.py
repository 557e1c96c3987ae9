"""Training steps per second with 1 vs N torch intra-op threads over a grid of (T, d_model),
in one process (``torch.set_num_threads`` between runs), for ``threads=auto``'s policy
(:mod:`attnlab.core.threads`) and the ``threads`` case of ``benchmarks/run.py``.

    python -m benchmarks.threads_grid --sizes 6x6,64x64,256x256,1024x768 --threads 1,2 --reps 3 --out grid.json

Each (size, thread count) trains attnlab's §5 step (``MultiHeadSelfAttention`` with one head, ``mse``, Adam lr 0.05,
d_k = d_v = d_model, deterministic algorithms on, as ``training.train``) from the same seed;
within a repetition the thread counts run one after another in a rotated order, so a
neighbour's load hits them alike. ``identical`` says whether every thread count gave
bitwise-identical losses (the check ``threads=auto`` relies on).
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from attnlab.core import optim
from attnlab.core.model import MultiHeadSelfAttention, mse, next_token_targets
from attnlab.core.training import deterministic_algorithms


def timed_steps(T: int, d_model: int, threads: int, steps: int, seed: int = 0) -> tuple[float, bytes]:
    """Train ``steps`` steps at (T, d_model) with ``threads`` intra-op threads; returns
    (loop seconds, the losses' bytes, float32 (steps,))."""
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    X = torch.randn(T, d_model)  # (T, d_model)
    target = next_token_targets(X)
    attention = MultiHeadSelfAttention(d_model, d_model, d_model)  # one head, as the tutorial
    optimizer = optim.Adam(attention.parameters(), lr=0.05)  # attnlab's (torch's update, bit for bit)
    losses = []
    t0 = time.perf_counter()
    for _ in range(steps):
        Z = attention(X).Z  # (T, d_model)
        loss = mse(Z, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    seconds = time.perf_counter() - t0
    return seconds, torch.stack(losses).numpy().tobytes()


def measure(sizes: list[tuple[int, int]], counts: list[int], reps: int, target_s: float) -> list[dict]:
    deterministic_algorithms()
    rows = []
    for T, d in sizes:
        timed_steps(T, d, max(counts), 2)  # warm-up: first-call costs (allocator, thread pool, dispatch)
        seconds, _ = timed_steps(T, d, 1, 3)
        steps = max(3, min(5000, round(target_s * 3 / max(seconds, 1e-6))))
        rates: dict[int, list[float]] = {n: [] for n in counts}
        results: dict[int, bytes] = {}
        for r in range(reps):
            order = counts[r % len(counts):] + counts[: r % len(counts)]
            for n in order:
                seconds, losses = timed_steps(T, d, n, steps)
                rates[n].append(steps / seconds)
                results.setdefault(n, losses)
        row = {"T": T, "d_model": d, "steps": steps,
               "sps": {str(n): statistics.median(v) for n, v in rates.items()},
               "samples": {str(n): v for n, v in rates.items()},
               "identical": len(set(results.values())) == 1}
        base = row["sps"][str(counts[0])]
        row["ratio"] = {str(n): row["sps"][str(n)] / base for n in counts}
        row["paired"] = {str(n): statistics.median(a / b for a, b in zip(rates[n], rates[counts[0]]))
                         for n in counts}
        rows.append(row)
        print(f"T={T:5d} d_model={d:4d} steps={steps:5d}  " + "  ".join(
            f"{n} thr {row['sps'][str(n)]:9.1f}/s (x{row['paired'][str(n)]:.2f})" for n in counts)
            + ("" if row["identical"] else "  LOSSES DIFFER"), flush=True)
    return rows


def parse_sizes(text: str) -> list[tuple[int, int]]:
    return [tuple(int(x) for x in item.split("x")) for item in text.split(",") if item]  # type: ignore[misc]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", required=True, help="comma-separated TxD, e.g. 6x6,1024x768")
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts, the first is the baseline")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--seconds", type=float, default=0.3, help="target loop time per run")
    p.add_argument("--out", type=Path, help="write the rows as JSON here")
    a = p.parse_args(argv)
    rows = measure(parse_sizes(a.sizes), [int(n) for n in a.threads.split(",")], a.reps, a.seconds)
    if a.out:
        a.out.write_text(json.dumps(rows), encoding="utf-8")


if __name__ == "__main__":
    main()
