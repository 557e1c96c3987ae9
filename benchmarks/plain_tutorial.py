"""The tutorial's section-5 training as a plain script: no Hydra, no logging, no run dir.

The baseline ``benchmarks/run.py`` measures attnlab against: the tutorial's code as a reader
would paste it into a file, plus the tokens the tutorial gets from earlier sections (GPT-2, built
offline from the ranks file attnlab ships with tiktoken's public API: ``tiktoken.get_encoding``
would need the network) and a few knobs for the sweep case. Threads are torch's defaults.

    python benchmarks/plain_tutorial.py                        # tutorial §5: 201 steps, 5 lines
    MPLBACKEND=Agg python benchmarks/plain_tutorial.py --figure evo.png   # ... and the section's figure
    python benchmarks/plain_tutorial.py --repeat 20 --steps 20 # 20 trainings in one process

``--figure PATH`` draws the section's "可视化：注意力权重的演化" figure with the tutorial's own
pyplot code, ``plt.savefig(PATH)`` in place of ``plt.show()``.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import tiktoken
import torch
from tiktoken.load import load_tiktoken_bpe
from torch import nn

RANKS = Path(__file__).resolve().parent.parent / "attnlab" / "data" / "gpt2.tiktoken"
SENTENCE = "Your journey starts with one step"
# tiktoken_ext.openai_public.r50k_pat_str (GPT-2's pre-tokenizer regex)
GPT2_PAT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""


def gpt2_encoding() -> tiktoken.Encoding:
    """tiktoken's GPT-2 encoding from the local ranks file (what ``get_encoding("gpt2")`` builds)."""
    ranks = load_tiktoken_bpe(str(RANKS))
    return tiktoken.Encoding(name="gpt2", pat_str=GPT2_PAT, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": 50256}, explicit_n_vocab=50257)


def train(token_ids: list[int], tokens: list[str], d_model: int = 6, d_out: int = 4, steps: int = 201,
          snapshot_steps=(0, 20, 50, 100, 200), focus: int = 1, verbose: bool = True) -> tuple[float, list]:
    """Tutorial §5, line for line (``d_out`` is the tutorial's Q/K size; V keeps d_model).
    Returns (loop seconds, snapshots)."""
    vocab_size, seq_len = 50257, len(token_ids)
    # 换个种子 + 更大的 embedding（std=1.0），让训练效果更明显
    torch.manual_seed(42)
    tok_emb = nn.Embedding(vocab_size, d_model)
    pos_emb = nn.Embedding(seq_len, d_model)
    nn.init.normal_(tok_emb.weight, std=1.0)
    nn.init.normal_(pos_emb.weight, std=1.0)

    X = (tok_emb(torch.tensor(token_ids)) + pos_emb(torch.arange(seq_len))).detach()

    Wq = nn.Linear(d_model, d_out, bias=False)
    Wk = nn.Linear(d_model, d_out, bias=False)
    Wv = nn.Linear(d_model, d_model, bias=False)

    # 目标：每个位置的输出 ≈ 下一个位置的 X
    target = torch.zeros_like(X)
    target[:-1] = X[1:]
    target[-1] = X[-1]

    optimizer = torch.optim.Adam(
        list(Wq.parameters()) + list(Wk.parameters()) + list(Wv.parameters()),
        lr=0.05
    )

    snapshots = []
    t0 = time.perf_counter()
    for step in range(steps):
        Q = Wq(X); K = Wk(X); V = Wv(X)
        scores = Q @ K.T / d_out ** 0.5
        weights = torch.softmax(scores, dim=-1)
        Z = weights @ V
        loss = ((Z - target) ** 2).mean()

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        if step in snapshot_steps:
            snapshots.append((step, loss.item(), weights.detach().clone()))
            if verbose:
                w = weights[focus].detach().numpy()
                row = " ".join(f"{t.strip()!r}={v:.2f}" for t, v in zip(tokens, w))
                print(f"step {step:3d}  loss={loss.item():.4f}  |  journey关注: {row}")
    return time.perf_counter() - t0, snapshots


def draw_figure(snapshots: list, tokens: list[str], path: str) -> None:
    """Tutorial §5's visualisation, line for line, with ``plt.savefig(path)`` for ``plt.show()``."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(snapshots), figsize=(4*len(snapshots), 4))
    for ax, (step, loss, w) in zip(axes, snapshots):
        im = ax.imshow(w.numpy(), cmap='viridis', vmin=0, vmax=1)
        ax.set_title(f"step={step}\nloss={loss:.3f}")
        ax.set_xticks(range(len(tokens))); ax.set_yticks(range(len(tokens)))
        ax.set_xticklabels([t.strip() for t in tokens], rotation=45, ha='right')
        ax.set_yticklabels([t.strip() for t in tokens])
    fig.colorbar(im, ax=axes, shrink=0.8)
    plt.suptitle("注意力权重的训练演化", y=1.02)
    plt.tight_layout()
    plt.savefig(path)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=201)
    p.add_argument("--snapshot-steps", default="0,20,50,100,200", help="comma-separated steps")
    p.add_argument("--repeat", type=int, default=1, help="trainings in this process, one after another")
    p.add_argument("--figure", metavar="PATH", help="also draw the tutorial's figure of the snapshots into PATH")
    a = p.parse_args(argv)

    enc = gpt2_encoding()
    token_ids = enc.encode(SENTENCE)
    tokens = [enc.decode([i]) for i in token_ids]
    snaps = {int(s) for s in a.snapshot_steps.split(",")}
    for _ in range(a.repeat):
        _, snapshots = train(token_ids, tokens, steps=a.steps, snapshot_steps=snaps)
    if a.figure:
        draw_figure(snapshots, tokens, a.figure)


if __name__ == "__main__":
    main()
