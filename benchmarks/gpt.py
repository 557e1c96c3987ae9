"""The mini-GPT's training loop vs a plain nanoGPT-style loop of the same model, on the CPU (or
``--device cuda`` when present): steps/s, ratio attnlab / plain (target >= 0.95).

    python -m benchmarks.gpt                      # n_layers 4, d_model 128, 4 heads, T 256; ~2 min quiet
    python -m benchmarks.gpt --steps 3 --reps 1   # smoke run
    python -m benchmarks.gpt --size n_layers=6 --size d_model=384 --size context=128 --size batch_size=32

Stands alone (attnlab and torch only): a config composed as the command line would
(:func:`attnlab.commands.api.compose`), ``threads=auto`` (the whole step counted: attnlab picks
torch's count for this size, as the plain loop runs with).

attnlab: :func:`attnlab.core.training.train` with ``model.attention=sdpa`` (the fused kernel;
the weights are computed at the 2 snapshot steps only), no sinks, its loop time
(``RunResult.wall_time_s``). plain: :func:`plain_gpt` below, nanoGPT's Block (one c_attn matmul,
F.scaled_dot_product_attention, GELU MLP), the same sizes, tokens, batch, loss and Adam. Both in
this process, one after the other, the order swapped every repetition; medians over ``--reps``.
"""
from __future__ import annotations

import argparse
import statistics
import time
from importlib import resources

import torch
import torch.nn.functional as F
from torch import nn

SIZES = {"n_layers": 4, "d_model": 128, "n_heads": 4, "context": 256, "batch_size": 1}


class PlainBlock(nn.Module):
    def __init__(self, d: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.ln_1, self.c_attn = nn.LayerNorm(d), nn.Linear(d, 3 * d, bias=False)
        self.c_proj = nn.Linear(d, d, bias=False)
        self.ln_2, self.c_fc, self.mlp_proj = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)
                   for t in self.c_attn(self.ln_1(x)).split(C, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, d_k)
        x = x + self.c_proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))


def plain_gpt(ids: torch.Tensor, steps: int, device: str, seed: int = 42) -> float:
    """Seconds of ``steps`` training steps of nanoGPT's model on windows of ``ids``."""
    s = SIZES
    torch.manual_seed(seed)
    d, T, V = s["d_model"], s["context"], 50257
    wte, wpe = nn.Embedding(V, d), nn.Embedding(T, d)
    blocks = nn.ModuleList(PlainBlock(d, s["n_heads"]) for _ in range(s["n_layers"]))
    ln_f, head = nn.LayerNorm(d), nn.Linear(d, V, bias=False)
    model = nn.ModuleList([wte, wpe, blocks, ln_f, head]).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    ids, pos = ids.to(device), torch.arange(T, device=device)
    t0 = time.perf_counter()
    for _ in range(steps):
        starts = torch.randint(0, ids.shape[0] - T + 1, (s["batch_size"],)).to(device)
        batch = ids[starts[:, None] + pos]  # (B, T)
        x = wte(batch) + wpe(pos)
        for block in blocks:
            x = block(x)
        logits = head(ln_f(x))
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), batch[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    loss.item()  # the device has finished
    return time.perf_counter() - t0


def attnlab_gpt(steps: int, device: str, torch_threads: int) -> float:
    from attnlab.commands.api import compose
    from attnlab.core.training import train

    s = SIZES
    cfg = compose("experiment=gpt", "model.attention=sdpa", f"device={device}", f"train.steps={steps}",
                  f"train.snapshot_steps=[0,{steps - 1}]", "train.val_fraction=0", "analysis.prompt=null",
                  "optimizer.lr=0.01", "tokenizer.max_tokens=1000000",
                  *(f"model.{k}={s[k]}" for k in ("n_layers", "d_model", "n_heads", "context")),
                  f"model.d_k={s['d_model'] // s['n_heads']}", f"model.d_v={s['d_model'] // s['n_heads']}",
                  f"train.batch_size={s['batch_size']}", "threads=auto")
    result = train(cfg)
    assert torch.get_num_threads() == torch_threads, "threads=auto did not pick torch's count for this size"
    return result.wall_time_s


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--size", action="append", default=[], metavar="KEY=N",
                   help=f"change a size ({', '.join(SIZES)}), e.g. --size n_layers=6 --size d_model=384")
    a = p.parse_args(argv)
    for item in a.size:
        key, value = item.split("=", 1)
        if key not in SIZES:
            p.error(f"--size {item}: the sizes are {', '.join(SIZES)}")
        SIZES[key] = int(value)
    from attnlab.core.tokenizer import encode

    torch_threads = torch.get_num_threads()
    text = (resources.files("attnlab.data") / "weather_zh.txt").read_text(encoding="utf-8")
    ids = torch.tensor(encode(text))
    times = {"attnlab": [], "plain": []}
    for rep in range(a.reps):
        for impl in (("attnlab", "plain") if rep % 2 == 0 else ("plain", "attnlab")):
            seconds = (attnlab_gpt(a.steps, a.device, torch_threads) if impl == "attnlab"
                       else plain_gpt(ids, a.steps, a.device))
            torch.set_num_threads(torch_threads)  # each loop starts at torch's count
            times[impl].append(a.steps / seconds)
    ours, plain = (statistics.median(times[k]) for k in ("attnlab", "plain"))
    threads = f"{torch_threads} thread{'s' if torch_threads > 1 else ''}"
    print(f"| {a.device} ({threads}) | {SIZES} | {ours:.2f} | {plain:.2f} | {ours / plain:.3f} |")


if __name__ == "__main__":
    main()
