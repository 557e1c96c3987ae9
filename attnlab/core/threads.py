"""torch's intra-op threads for a job: ``threads=auto`` is one thread below
:data:`MIN_WORK_FOR_MORE` multiply-adds per training step (at the tutorial's sizes a second thread
only adds synchronisation; measured in ``benchmarks/``), else torch's own count; an int is used as is.
The step counted is the whole step (:func:`work_per_step`): every layer's attention and MLP, the
next-token head over the vocabulary (50,257 columns for GPT-2), the batch, so a mini-GPT gets the
cores a plain PyTorch loop would. summary.json records the count as ``versions.torch_threads``;
attnlab-reproduce reuses it.
"""
from __future__ import annotations

from typing import Any

MIN_WORK_FOR_MORE = 2.5e6  # multiply-adds per step from which more threads pay (2 cores: (64, 64) 3.9e6 does)
_default: int | None = None  # torch's own count in this process, before attnlab set one


def work_per_step(seq_len: int, d_model: int, d_k: int | None = None, d_v: int | None = None,
                  n_heads: int = 1, *, out_proj: bool = False, n_layers: int = 0, d_ff: int | None = None,
                  vocab_size: int = 0, batch_size: int = 1) -> float:
    """Multiply-adds of one training step (forward + backward: times 3) on ``batch_size`` windows of
    ``seq_len`` tokens. Per head: Q, K, V = X W (T·d_model·(2 d_k + d_v)), Q Kᵀ (T²·d_k), weights V
    (T²·d_v); W_out (T·H·d_v·d_model) when ``out_proj``; a GPT's block (``n_layers`` >= 1) adds its
    MLP (2·T·d_model·d_ff, d_ff 4·d_model when None) and there are ``n_layers`` blocks; the
    next-token head T·d_model·``vocab_size`` (0: no head, §5's mse objective)."""
    d_k, d_v = d_k or d_model, d_v or d_model
    attention = n_heads * (seq_len * d_model * (2 * d_k + d_v) + seq_len * seq_len * (d_k + d_v))
    attention += seq_len * n_heads * d_v * d_model if out_proj else 0
    mlp = 2 * seq_len * d_model * (d_ff or 4 * d_model) if n_layers else 0
    head = seq_len * d_model * vocab_size
    return 3.0 * batch_size * (max(1, n_layers) * (attention + mlp) + head)


def _torch_default() -> int:
    global _default
    if _default is None:
        import torch

        _default = torch.get_num_threads()
    return _default


def auto_threads(seq_len: int, d_model: int, d_k: int | None = None, d_v: int | None = None,
                 n_heads: int = 1, **step: Any) -> int:
    """1 below :data:`MIN_WORK_FOR_MORE` multiply-adds per step (:func:`work_per_step`, ``step`` its
    keywords), else torch's default count."""
    work = work_per_step(seq_len, d_model, d_k, d_v, n_heads, **step)
    return 1 if work < MIN_WORK_FOR_MORE else _torch_default()


def resolve(value: Any, seq_len: int, d_model: int, d_k: int | None = None, d_v: int | None = None,
            n_heads: int = 1, **step: Any) -> int:
    """The count for the ``threads`` value (``"auto"`` or a positive int) at this size."""
    return auto_threads(seq_len, d_model, d_k, d_v, n_heads, **step) if value == "auto" else int(value)


def for_job(cfg: Any, seq_len: int, vocab_size: int = 0, out_proj: bool = False) -> int:
    """The count job ``cfg`` runs on: its ``threads`` at ``seq_len`` tokens (a GPT's context), with a
    next-token head over ``vocab_size`` ids (0: none), a GPT's blocks and ``train.batch_size``."""
    m = cfg.model
    return resolve(cfg.get("threads", "auto"), seq_len, m.d_model, m.d_k, m.d_v, m.n_heads, out_proj=out_proj,
                   n_layers=m.n_layers, d_ff=m.d_ff, vocab_size=vocab_size,
                   batch_size=cfg.train.batch_size if m.n_layers else 1)


def configure(cfg: Any, seq_len: int, vocab_size: int = 0, out_proj: bool = False) -> int:
    """``torch.set_num_threads(`` :func:`for_job` ``)``; the count torch then reports."""
    import torch

    _torch_default()  # remembered before it changes
    n = for_job(cfg, seq_len, vocab_size, out_proj)
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return torch.get_num_threads()


def for_reproduction(recorded_versions: Any) -> int | None:
    """``versions.torch_threads`` of someone else's summary.json when a positive int, else None."""
    value = recorded_versions.get("torch_threads") if isinstance(recorded_versions, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
