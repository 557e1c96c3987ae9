"""torch's intra-op threads for a job: ``threads=auto`` is one thread below
:data:`MIN_WORK_FOR_MORE` multiply-adds per step (at the tutorial's sizes a second thread only
adds synchronisation; measured in ``benchmarks/``), else torch's own count; an int is used as is.
summary.json records the count as ``versions.torch_threads``; attnlab-reproduce reuses it.
"""
from __future__ import annotations

from typing import Any

MIN_WORK_FOR_MORE = 2.5e6  # multiply-adds per step from which more threads pay (2 cores: (64, 64) 3.9e6 does)
_default: int | None = None  # torch's own count in this process, before attnlab set one


def work_per_step(seq_len: int, d_model: int, d_k: int | None = None, d_v: int | None = None,
                  n_heads: int = 1) -> float:
    """Multiply-adds of one §5 step, per head: Q, K, V = X W (T·d_model·(2 d_k + d_v)), Q Kᵀ
    (T²·d_k), weights V (T²·d_v); times 3 for forward + backward."""
    d_k, d_v = d_k or d_model, d_v or d_model
    return 3.0 * n_heads * (seq_len * d_model * (2 * d_k + d_v) + seq_len * seq_len * (d_k + d_v))


def _torch_default() -> int:
    global _default
    if _default is None:
        import torch

        _default = torch.get_num_threads()
    return _default


def auto_threads(seq_len: int, d_model: int, d_k: int | None = None, d_v: int | None = None,
                 n_heads: int = 1) -> int:
    """1 below :data:`MIN_WORK_FOR_MORE` multiply-adds per step, else torch's default count."""
    return 1 if work_per_step(seq_len, d_model, d_k, d_v, n_heads) < MIN_WORK_FOR_MORE else _torch_default()


def resolve(value: Any, seq_len: int, d_model: int, d_k: int | None = None, d_v: int | None = None,
            n_heads: int = 1) -> int:
    """The count for the ``threads`` value (``"auto"`` or a positive int) at this size."""
    return auto_threads(seq_len, d_model, d_k, d_v, n_heads) if value == "auto" else int(value)


def configure(cfg: Any, seq_len: int) -> int:
    """``torch.set_num_threads`` for job ``cfg`` at ``seq_len`` tokens; the count torch then reports."""
    import torch

    _torch_default()  # remembered before it changes
    m = cfg.model
    n = resolve(cfg.get("threads", "auto"), seq_len, m.d_model, m.d_k, m.d_v, m.n_heads)
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return torch.get_num_threads()


def for_reproduction(recorded_versions: Any) -> int | None:
    """``versions.torch_threads`` of someone else's summary.json when a positive int, else None."""
    value = recorded_versions.get("torch_threads") if isinstance(recorded_versions, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
