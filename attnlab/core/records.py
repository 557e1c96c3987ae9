"""What a run records, and the :class:`Sink` interface the loop calls in order
(docs/architecture.md): a new output is one new class with these methods."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


@dataclass
class RunInfo:
    """What a sink knows before the first step: ``config`` resolved, plain; ``tokens`` (T) labels;
    ``run_dir`` None when nothing is written (Python API)."""

    config: dict[str, Any]
    token_ids: list[int]
    tokens: list[str]
    snapshot_steps: list[int]
    steps: int
    focus_token: int
    run_dir: Path | None = None

    @property
    def seq_len(self) -> int:  # T
        return len(self.token_ids)


@dataclass
class Snapshot:
    """``weights`` (H, T, T) float32 at ``step``, rows sum to 1; ``loss`` of the same forward (§5).
    A GPT (model.n_layers = L): ``weights`` its last block's on the text's first window, ``layers``
    (L, H, T, T) every block's, ``val_loss`` on the held-out tail (None without one)."""

    step: int
    loss: float
    weights: np.ndarray
    layers: np.ndarray | None = None
    val_loss: float | None = None


def head_mean(weights: np.ndarray) -> np.ndarray:
    """Weights (H, T, T) or (T, T) as one (T, T) float64 matrix, heads averaged."""
    w = np.asarray(weights, dtype=np.float64)
    return w.mean(axis=0) if w.ndim == 3 else w


@dataclass
class RunResult:
    """How a run ended: ``status`` completed, diverged, interrupted or failed (``error`` one line); the first
    step with loss < ``train.loss_threshold``; seconds; ``losses`` (steps_run,) float64, ``snapshots`` if kept."""

    status: str
    steps_run: int
    final_loss: float | None
    wall_time_s: float
    error: str | None = None
    steps_to_threshold: int | None = None
    token_ids: list[int] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)
    losses: np.ndarray = field(default_factory=lambda: np.zeros(0))
    snapshots: list[Snapshot] = field(default_factory=list)
    generation: dict[str, Any] | None = None  # analysis.prompt's continuation (attnlab.core.generate)
    parameters: dict[str, np.ndarray] | None = None  # a GPT's trained weights, float32, by state_dict name


class Sink:
    """Every method optional. Order: ``on_start``; ``on_losses`` / ``on_snapshot`` in step order;
    then ``flush`` on every sink; then ``on_end`` (whatever the status) and ``close`` on each."""

    def on_start(self, info: RunInfo) -> None:
        """Before the first step."""

    def on_losses(self, steps: np.ndarray, losses: np.ndarray) -> None:
        """Consecutive steps ``(n,)`` int64 and their losses ``(n,)`` float64."""

    def on_snapshot(self, snapshot: Snapshot) -> None:
        """After the losses up to its step."""

    def flush(self) -> None:
        """Once, after the last step, before any sink's ``on_end``."""

    def on_end(self, result: RunResult) -> None:
        """Once, with the final status."""

    def close(self) -> None:
        """After ``on_end``."""
