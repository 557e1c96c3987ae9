"""The console sink: the tutorial's §5 lines at each snapshot step, and a progress bar on long runs."""
from __future__ import annotations

import sys

import numpy as np

from attnlab.records import RunInfo, RunResult, Sink, Snapshot
from attnlab.tokenizer import show

PROGRESS_MIN_STEPS = 1000  # shorter runs finish too fast for a bar to help
MAX_TARGETS_SHOWN = 12  # longer rows show the strongest targets only


def snapshot_line(step: int, loss: float, row: np.ndarray, tokens: list[str], focus: int) -> str:
    """The tutorial §5 line for one snapshot, e.g.
    ``step   0  loss=2.3566  |  ' journey' attends: 'Your'=0.22 'journey'=0.12 ...``.

    ``row`` (T,) is the focus token's attention weights; with more than 12 tokens only the 12
    strongest are shown, in position order.
    """
    shown = range(len(tokens))
    if len(tokens) > MAX_TARGETS_SHOWN:
        shown = sorted(np.argsort(-row, kind="stable")[:MAX_TARGETS_SHOWN].tolist())
    targets = " ".join(f"{show(tokens[j].strip())}={row[j]:.2f}" for j in shown)
    return f"step {step:3d}  loss={loss:.4f}  |  {show(tokens[focus])} attends: {targets}"


class ConsoleSink(Sink):
    """Prints one :func:`snapshot_line` per snapshot and a closing line with the status;
    shows a tqdm progress bar (on a terminal) when ``progress`` and the run has ≥ 1000 steps."""

    def __init__(self, progress: bool = True, file=None) -> None:
        self.progress = progress
        self.file = file or sys.stdout
        self._bar = None
        self._info: RunInfo | None = None

    def on_start(self, info: RunInfo) -> None:
        self._info = info
        if self.progress and info.steps >= PROGRESS_MIN_STEPS:
            from tqdm import tqdm

            self._bar = tqdm(total=info.steps, unit="step", leave=False, disable=None)

    def _print(self, line: str) -> None:
        if self._bar is not None:
            self._bar.write(line, file=self.file)
        else:
            print(line, file=self.file, flush=True)

    def on_losses(self, steps: np.ndarray, losses: np.ndarray) -> None:
        if self._bar is not None:
            self._bar.update(len(steps))

    def on_snapshot(self, snapshot: Snapshot) -> None:
        info = self._info
        row = snapshot.weights[0, info.focus_token]
        self._print(snapshot_line(snapshot.step, snapshot.loss, row, info.tokens, info.focus_token))

    def on_end(self, result: RunResult) -> None:
        self.close()
        final = "n/a" if result.final_loss is None else f"{result.final_loss:.6g}"
        where = f"  ->  {self._info.run_dir}" if self._info and self._info.run_dir else ""
        line = f"{result.status}: {result.steps_run} steps, final loss {final}, {result.wall_time_s:.2f} s{where}"
        if result.error:
            line += f"\n{result.status}: {result.error}"
        print(line, file=self.file, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
