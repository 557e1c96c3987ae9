"""Torch's intra-op threads for a job: ``threads=auto`` picks them from the problem size.

torch starts with one intra-op thread per core (or ``OMP_NUM_THREADS``). For the tutorial's
sizes (T = 6 tokens, d_model = 6) every op is a few hundred multiply-adds: a second thread
only adds synchronisation, and on a machine with other load it waits for a core each op (the
plain tutorial loop, 3,000 steps on 2 busy cores: 24.1 s with 2 threads, 5.2 s with 1). A run
knows its size before any tensor work, so ``auto`` uses one thread below
:data:`MIN_WORK_FOR_MORE` multiply-adds per training step and torch's default count above it,
where the steps/s measured in ``benchmarks/`` (``python -m benchmarks.run --only threads``,
docs/benchmarks.md) show more threads pay. A positive integer is used as given.

Set once per job, before the first tensor is made (:func:`configure`, called by
``training.build_model``); the count used is what ``summary.json`` records as
``versions.torch_threads`` and what ``attnlab-reproduce`` runs with (:func:`for_reproduction`).
Inter-op threads are left alone: eager training does not use them, and
``torch.set_num_interop_threads`` raises once any parallel work has started in the process.
"""
from __future__ import annotations

from typing import Any

AUTO = "auto"
# multiply-adds of one training step (forward + backward, see work_per_step) from which
# more than one thread pays; measured on 2 cores (docs/benchmarks.md, "threads")
MIN_WORK_FOR_MORE = 3e7

_default: int | None = None  # torch's own count in this process, before attnlab changed it


def work_per_step(seq_len: int, d_model: int, d_k: int | None = None, d_v: int | None = None,
                  n_heads: int = 1) -> float:
    """Multiply-adds of one §5 training step: the forward pass (Q, K, V = X W: T·d_model·(2 d_k + d_v);
    scores Q Kᵀ: T²·d_k; Z = weights V: T²·d_v; per head) times 3 for forward + backward."""
    d_k = d_model if d_k is None else d_k
    d_v = d_model if d_v is None else d_v
    forward = n_heads * (seq_len * d_model * (2 * d_k + d_v) + seq_len * seq_len * (d_k + d_v))
    return 3.0 * forward


def default_threads() -> int:
    """torch's intra-op thread count for this process before attnlab set one (cores or
    ``OMP_NUM_THREADS``)."""
    global _default
    if _default is None:
        import torch

        _default = torch.get_num_threads()
    return _default


def auto_threads(seq_len: int, d_model: int, d_k: int | None = None, d_v: int | None = None,
                 n_heads: int = 1) -> int:
    """``threads=auto``: 1 below :data:`MIN_WORK_FOR_MORE` multiply-adds per step, else torch's
    default count (never more: ``OMP_NUM_THREADS=1`` keeps every run at one thread)."""
    if work_per_step(seq_len, d_model, d_k, d_v, n_heads) < MIN_WORK_FOR_MORE:
        return 1
    return default_threads()


def resolve(value: Any, seq_len: int, d_model: int, d_k: int | None = None, d_v: int | None = None,
            n_heads: int = 1) -> int:
    """The thread count for the ``threads`` config value (``"auto"`` or a positive int, as
    :mod:`attnlab.core.checks` allows) at this size."""
    if value == AUTO:
        return auto_threads(seq_len, d_model, d_k, d_v, n_heads)
    return int(value)


def apply(n: int) -> int:
    """``torch.set_num_threads(n)``; returns the count torch then reports (the one used)."""
    import torch

    default_threads()  # remember torch's own count before changing it
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return torch.get_num_threads()


def configure(cfg: Any, seq_len: int) -> int:
    """Set torch's threads for the job ``cfg`` at ``seq_len`` tokens (``cfg.threads``, a
    config without the key counts as ``auto``); returns the count used."""
    model = cfg.model
    value = cfg.get("threads", AUTO) if hasattr(cfg, "get") else getattr(cfg, "threads", AUTO)
    return apply(resolve(value, seq_len, model.d_model, model.d_k, model.d_v,
                         int(getattr(model, "n_heads", 1) or 1)))


def for_reproduction(recorded_versions: Any) -> int | None:
    """The thread count a reproduction must use: ``torch_threads`` from a run's
    ``summary.json`` ``versions`` (what the run used), or None when it is missing or not a
    positive integer (then the caller warns that losses may differ in the last bits and keeps
    ``threads=auto``). Reads a run dir's data only: nothing is resolved or instantiated."""
    if not isinstance(recorded_versions, dict):
        return None
    value = recorded_versions.get("torch_threads")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    return value
