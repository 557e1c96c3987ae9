"""What a run records, and the interface every sink implements (DESIGN.md, "One picture").

The training loop (``training.py``) knows nothing about where records go: it calls the
methods of each :class:`Sink` in order. A new output (another logger, a web view) is one new
class with these four methods.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


@dataclass
class RunInfo:
    """Everything a sink needs to know before the first step.

    ``config`` is the resolved config as a plain ``dict`` (no interpolations left);
    ``tokens`` are readable labels (``tokenizer.token_labels``), one per position, length T;
    ``run_dir`` is None when the run writes no files (Python API).
    """

    config: dict[str, Any]
    token_ids: list[int]
    tokens: list[str]
    snapshot_steps: list[int]
    steps: int
    focus_token: int
    run_dir: Path | None = None

    @property
    def seq_len(self) -> int:
        """T, the number of tokens."""
        return len(self.token_ids)


@dataclass
class Snapshot:
    """The attention weights at one snapshot step.

    ``weights`` is ``(H, T, T)`` float32 (H = 1 head), rows sum to 1; ``loss`` is the loss of
    the forward pass that produced these weights (the tutorial's §5 printing convention).
    """

    step: int
    loss: float
    weights: np.ndarray


def head_mean(weights: np.ndarray) -> np.ndarray:
    """Attention weights ``(H, T, T)`` (a snapshot) or ``(T, T)`` as one ``(T, T)`` float64
    matrix, heads averaged (H = 1 in attnlab, so this is the one head's weights)."""
    w = np.asarray(weights, dtype=np.float64)
    return w.mean(axis=0) if w.ndim == 3 else w


@dataclass
class RunResult:
    """How a run ended. ``status`` is one of completed, diverged, interrupted, failed.

    ``steps_run`` steps were recorded; ``final_loss`` is the last recorded loss;
    ``steps_to_threshold`` the first step whose loss is below ``train.loss_threshold`` (None if
    none is); ``wall_time_s`` seconds from the first step to the end; ``error`` one line for a
    run that did not complete. ``token_ids`` (T,) and ``tokens`` (their labels) are the text
    trained on. ``losses`` (steps_run,) float64 and ``snapshots`` (in step order) are kept only
    when the caller asks for them (``training.train``).
    """

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


class Sink:
    """Base class: a sink receives records; every method is optional to override.

    Call order: ``on_start`` once, then ``on_losses`` / ``on_snapshot`` interleaved in step
    order, then ``on_end`` once (also when the run fails or is interrupted), then ``close``.
    """

    def on_start(self, info: RunInfo) -> None:
        """Before the first step."""

    def on_losses(self, steps: np.ndarray, losses: np.ndarray) -> None:
        """A batch of consecutive steps ``(n,)`` int64 and their losses ``(n,)`` float64."""

    def on_snapshot(self, snapshot: Snapshot) -> None:
        """One attention snapshot, after the losses up to its step were sent."""

    def flush(self) -> None:
        """Put what is buffered on disk: once, after the last step, before any sink's
        :meth:`on_end` (the run's last writes then have the disk reserve to themselves)."""

    def on_end(self, result: RunResult) -> None:
        """Once, with the final status (``result.losses`` holds every loss)."""

    def close(self) -> None:
        """Release files; called in ``finally``, after ``on_end``."""
