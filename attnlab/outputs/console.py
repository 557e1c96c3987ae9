"""The console sink: the tutorial's §5 lines at each snapshot step, and a progress bar on long runs."""
from __future__ import annotations

import importlib.util
import re
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from attnlab.core.files import printable
from attnlab.core.focus import shown, target
from attnlab.core.i18n import _
from attnlab.core.records import RunInfo, RunResult, Sink, Snapshot
from attnlab.core.tokenizer import show
from attnlab.outputs.streams import safe

PROGRESS_MIN_STEPS = 1000  # shorter runs finish too fast for a bar to help
MAX_TARGETS_SHOWN = 12  # longer rows show the strongest targets only
ETA_AFTER_S, ETA_MIN_S = 2.0, 10.0  # a run still this far from its end after 2 s of training says so


def duration(seconds: float) -> str:
    """``45 s``, ``3 min 20 s``, ``2 h 5 min``."""
    s = round(seconds)
    if s < 60:
        return _("{s} s").format(s=s)
    return (_("{min} min {s} s").format(min=s // 60, s=s % 60) if s < 3600
            else _("{h} h {min} min").format(h=s // 3600, min=s % 3600 // 60))


def job_prefix() -> str:
    """``"[job N] "`` for a sweep job whose launcher may run jobs side by side (not ``basic``), else ``""``."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return ""
    hc = HydraConfig.get()
    sequential = hc.mode != RunMode.MULTIRUN or hc.runtime.choices.get("hydra/launcher", "basic") == "basic"
    return "" if sequential else f"[job {hc.job.num}] "


def prefixed(text: str, prefix: str) -> str:
    """``text`` with ``prefix`` before each line (an empty line gets it without its trailing space)."""
    return "\n".join(prefix + line if line else prefix.rstrip() for line in text.split("\n"))


def display_path(path) -> str:
    """``path`` relative to the working directory when it lies below it, else absolute."""
    try:
        path = Path(path).resolve()
        return str(path.relative_to(Path.cwd()))
    except (ValueError, OSError):  # not below it, or the working folder is gone (deleted meanwhile)
        return str(path)


def snapshot_line(step: int, loss: float, row: np.ndarray, tokens: list[str], focus: int) -> str:
    """The tutorial §5 line for one snapshot, ``step   0  loss=2.3566  |  ' journey' attends: 'Your'=0.22 ...``:
    ``row`` (T,) is the focus token's weights; over 12 tokens the 12 strongest; a token the text holds more
    than once is named with its position, ``'the'@7=0.12``."""
    shown, more = range(len(tokens)), ""
    if len(tokens) > MAX_TARGETS_SHOWN:
        shown = sorted(np.argsort(-row, kind="stable")[:MAX_TARGETS_SHOWN].tolist())
        more = _("  ({n} strongest of {T})").format(n=MAX_TARGETS_SHOWN, T=len(tokens))
    counts = Counter(tokens)
    targets = " ".join(f"{show(tokens[j].strip() or tokens[j])}{f'@{j}' if counts[tokens[j]] > 1 else ''}"
                       f"={row[j]:.2f}" for j in shown) + more
    # zh names the focus token as the tutorial prints it, bare: ``journey关注:``
    return _("step {step:3d}  loss={loss:.4f}  |  {focus} attends: {targets}").format(
        step=step, loss=loss, focus=show(tokens[focus]), bare=tokens[focus].strip() or show(tokens[focus]),
        targets=targets)


def generation_lines(generation: dict) -> list[str]:
    """analysis.prompt's continuation: the text, then each new token with its probability; [] for none."""
    if not generation:
        return []
    text = show(generation["text"])
    if generation.get("unfinished_bytes"):  # the last tokens began a character they did not finish
        text += _(" + …(part of a character)")
    lines = [_("{prompt} → {text}").format(prompt=show(generation["prompt"]), text=text),
             "  " + "  ".join(_("{token} p={p:.3f}").format(token=show(label), p=p)
                              for _id, label, p in generation["tokens"])]
    if any(re.search(r"\(\d+/\d+\)", str(label)) for _id, label, _p in generation["tokens"]):
        lines.append(_("  (GPT-2's tokens are pieces of UTF-8 bytes: a 汉字 is 3 bytes, often 2 tokens, "
                       "shown as 好(1/2) 好(2/2); one of them alone is half a character)"))
    return lines


class ConsoleSink(Sink):
    """One :func:`snapshot_line` per snapshot and a closing line with the status (naming the run dir with
    ``where``); with ``progress`` and ≥ 1000 steps a tqdm bar on a terminal (``notebook``: in a Jupyter cell
    too), else a line with the time to go. ``prefix`` (:func:`job_prefix`) starts every line, names the bar."""

    def __init__(self, progress: bool = True, file=None, prefix: str = "", notebook: bool = False,
                 where: bool = True) -> None:
        self.progress = progress
        self.notebook = notebook
        self.where = where
        self.file = safe(file or sys.stdout)
        self.prefix = prefix
        self._bar = None
        self._info: RunInfo | None = None
        self._t0: float | None = None  # the clock at the first losses; None once the time to go is said

    def on_start(self, info: RunInfo) -> None:
        self._info = info
        self._t0 = time.monotonic()
        if self.progress and info.steps >= PROGRESS_MIN_STEPS:
            if self.notebook and importlib.util.find_spec("ipywidgets") is not None:  # a widget in the cell
                from tqdm.auto import tqdm as bar
            else:
                from tqdm import tqdm as bar

            self._bar = bar(total=info.steps, unit="step", leave=False, disable=False if self.notebook else None,
                            desc=self.prefix.strip() or None, file=safe(sys.stderr))

    def _print(self, line: str) -> None:
        line = prefixed(line, self.prefix)
        if self._bar is not None:
            self._bar.write(line, file=self.file)
        else:
            print(line, file=self.file, flush=True)

    def on_losses(self, steps: np.ndarray, losses: np.ndarray) -> None:
        if self._bar is not None:
            self._bar.update(len(steps))
        if self._t0 is None or not len(steps) or (self._bar is not None and not self._bar.disable):
            return  # said already, or the bar shows the time to go
        elapsed, done = time.monotonic() - self._t0, int(steps[-1]) + 1
        if elapsed >= ETA_AFTER_S:
            self._t0, left = None, (self._info.steps - done) * elapsed / done
            if left >= ETA_MIN_S:
                self._print(_("step {done} of {steps} after {elapsed}: about {left} to go ({rate:.0f} steps/s; "
                              "Ctrl-C stops it and keeps every step)").format(
                    done=done, steps=self._info.steps, elapsed=duration(elapsed), left=duration(left),
                    rate=done / elapsed))

    def on_snapshot(self, snapshot: Snapshot) -> None:
        info = self._info
        heads = snapshot.weights[:, info.focus_token]  # (H, T): the focus token's row in every head
        val = "" if snapshot.val_loss is None else _("  (validation loss {val:.4f})").format(val=snapshot.val_loss)
        line = snapshot_line(snapshot.step, snapshot.loss, heads.mean(axis=0), info.tokens, info.focus_token)
        self._print(line + val)
        if len(heads) > 1:  # the line above is the head mean; where each head attends most
            labels = [t.strip() or t for t in info.tokens]
            strongest = " ".join(f"{h}→{shown(t)}={w:.2f}" for h, (t, w) in enumerate(target(r, labels) for r in heads))
            self._print(_("          {H} heads, strongest key each: {strongest}").format(H=len(heads),
                                                                                      strongest=strongest))

    def on_end(self, result: RunResult) -> None:
        self.close()
        # 4 significant digits: what the tutorial's run gives on every CPU kernel (4.940e-06; the 5th varies)
        final = "n/a" if result.final_loss is None else f"{result.final_loss:#.4g}"
        steps = (_("1 step") if result.steps_run == 1 else _("{n} steps")).format(n=result.steps_run)
        where = (f"  ->  {display_path(self._info.run_dir)}" if self.where and self._info and self._info.run_dir
                 else "")
        status = {"completed": _("completed"), "diverged": _("diverged"), "interrupted": _("interrupted"),
                  "failed": _("failed")}.get(result.status, result.status)
        name = self._info.config.get("name") if self._info else None
        if name:
            status = _("{status} ({name})").format(status=status, name=printable(name, 100))
        self._print(_("{status}: {steps}, final loss {final}, {time:.2f} s{where}").format(
            status=status, steps=steps, final=final, time=result.wall_time_s, where=where))  # (bar closed)
        for line in generation_lines(result.generation or {}):
            self._print(line)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
