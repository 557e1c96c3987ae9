"""torch's intra-op threads for a job: ``threads=auto`` is one thread below :data:`MIN_WORK_FOR_MORE`
multiply-adds per training step (a second thread only adds synchronisation there; ``benchmarks/``), else
torch's own count; an int is used as is. summary.json records the count as ``versions.torch_threads``."""
from __future__ import annotations

from typing import Any

MIN_WORK_FOR_MORE = 2.5e6  # multiply-adds per step from which more threads pay (2 cores: (64, 64) 3.9e6 does)
_default: int | None = None  # torch's own count in this process, before attnlab set one


def work_per_step(seq_len: int, d_model: int, d_k: int | None = None, d_v: int | None = None,
                  n_heads: int = 1, *, out_proj: bool = False, n_layers: int = 0, d_ff: int | None = None,
                  vocab_size: int = 0, batch_size: int = 1) -> float:
    """Multiply-adds of one whole training step (forward + backward: × 3) on ``batch_size`` windows of T =
    ``seq_len`` tokens: per head X W for Q, K, V, Q Kᵀ and weights V; W_out; a GPT block's MLP (d_ff 4·d_model
    when None), × ``n_layers``; the next-token head over ``vocab_size`` columns (0: none, §5's mse)."""
    d_k, d_v = d_k or d_model, d_v or d_model
    attention = n_heads * (seq_len * d_model * (2 * d_k + d_v) + seq_len * seq_len * (d_k + d_v))
    attention += seq_len * n_heads * d_v * d_model if out_proj else 0
    mlp = 2 * seq_len * d_model * (d_ff or 4 * d_model) if n_layers else 0
    head = seq_len * d_model * vocab_size
    return 3.0 * batch_size * (max(1, n_layers) * (attention + mlp) + head)


def auto_threads(seq_len: int, d_model: int, d_k: int | None = None, d_v: int | None = None,
                 n_heads: int = 1, **step: Any) -> int:
    """1 below :data:`MIN_WORK_FOR_MORE` (:func:`work_per_step`, ``step`` its keywords), else torch's own
    count (as :func:`configure` first saw it)."""
    return 1 if work_per_step(seq_len, d_model, d_k, d_v, n_heads, **step) < MIN_WORK_FOR_MORE else _default


def configure(cfg: Any, seq_len: int, vocab_size: int = 0, out_proj: bool = False) -> int:
    """``torch.set_num_threads`` to job ``cfg``'s ``threads`` (auto: :func:`auto_threads` at ``seq_len``
    tokens, a GPT's context, with a next-token head over ``vocab_size`` ids); the count torch then reports."""
    import torch

    global _default
    if _default is None:
        _default = torch.get_num_threads()
    m, n = cfg.model, cfg.get("threads", "auto")
    if n == "auto":
        n = auto_threads(seq_len, m.d_model, m.d_k, m.d_v, m.n_heads, out_proj=out_proj, n_layers=m.n_layers,
                         d_ff=m.d_ff, vocab_size=vocab_size, batch_size=cfg.train.batch_size if m.n_layers else 1)
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return torch.get_num_threads()


def for_reproduction(recorded_versions: Any) -> int | None:
    """``versions.torch_threads`` of someone else's summary.json when a positive int, else None."""
    value = recorded_versions.get("torch_threads") if isinstance(recorded_versions, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
