"""Saved runs read back into rows: finding run dirs under a path, and one table row per run.

Shared by ``attnlab-compare`` (:mod:`attnlab.compare`), the end-of-sweep table
(:mod:`attnlab.sweep`) and the report, so all of them always agree. A row is built from the
run's own files only (``summary.json``, ``attention.npz`` or ``walkthrough.npz``, ``.hydra/``).

Row keys (:data:`COLUMNS`, then the exercise observations a row has, :data:`attnlab.exercises.COLUMNS`):

- ``job``: the run's folder relative to the common parent of the PATHs (a sweep job's folder
  name, e.g. ``0_model.d_model=6``); ``overrides``: its command-line overrides, space-separated;
- ``status``: completed, diverged, interrupted, failed, running (summary.json), or ``missing``
  (no summary.json); ``error``: the one-line message of a run that did not complete;
- ``final_loss`` (MSE, no unit), ``steps_run``, ``steps_to_threshold`` (first step whose loss
  is below ``loss_threshold`` = the run's ``train.loss_threshold``; empty if never);
- ``focus_token``, ``focus_target``, ``focus_weight``, ``snapshot_step``: at the last attention
  snapshot, the token the focus token (``train.focus_token``) attends to most and that weight
  (for ``task=walkthrough``: the walkthrough's single set of weights, snapshot_step empty);
- ``wall_time_s``: seconds the run took (training loop, or the whole walkthrough);
- ``path``: the run dir.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from attnlab import artifacts, exercises
from attnlab.errors import AttnlabError, RunDirError
from attnlab.records import head_mean

COLUMNS = ["job", "overrides", "status", "final_loss", "steps_run", "steps_to_threshold", "loss_threshold",
           "focus_token", "focus_target", "focus_weight", "snapshot_step", "wall_time_s", "error"]
MAX_DEPTH = 6  # folders below a PATH searched for runs (outputs/multirun/NAME/DATE/TIME/JOB is 5)


def _is_job_dir(path: Path) -> bool:
    return (path / ".hydra" / "config.yaml").is_file()


def find_runs(path: Path) -> list[Path]:
    """Run dirs at or under ``path``: ``[path]`` for a run dir, else every folder at most
    :data:`MAX_DEPTH` levels below it holding ``.hydra/config.yaml`` (not looking inside those). Raises RunDirError when
    ``path`` does not exist or holds no run."""
    path = Path(path)
    if not path.exists():
        raise RunDirError(f"{path}: no such file or directory")
    if not path.is_dir():
        raise RunDirError(f"{path}: not a run dir or sweep dir (not a directory)")
    if _is_job_dir(path):
        return [path]
    found = []
    for dirpath, dirnames, _ in os.walk(path):
        here = Path(dirpath)
        if len(here.relative_to(path).parts) > MAX_DEPTH:
            dirnames[:] = []
            continue
        if here != path and _is_job_dir(here):
            found.append(here)
            dirnames[:] = []
            continue
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
    if not found:
        raise RunDirError(f"{path}: not a run dir or sweep dir (no .hydra/config.yaml in it or below it)")
    return found


def _load_yaml(path: Path) -> Any:
    """A YAML file as plain data (None when unreadable), with libyaml's safe loader when there
    is one: ~20x faster than ``OmegaConf.load`` (a sweep's summary reads 3 files per job)."""
    import yaml

    try:
        return yaml.load(Path(path).read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except Exception:
        return None


def _select(data: Any, key: str, default: Any = None) -> Any:
    """``data["a"]["b"]`` for ``key="a.b"``; ``default`` when a level is missing or not a mapping."""
    for part in key.split("."):
        if not isinstance(data, dict) or part not in data:
            return default
        data = data[part]
    return data


def _job_num(run_dir: Path) -> int | None:
    num = _select(_load_yaml(run_dir / ".hydra" / "hydra.yaml"), "hydra.job.num")
    if isinstance(num, int):
        return num
    head = run_dir.name.split("_", 1)[0]
    return int(head) if head.isdigit() else None


def _labels(token_ids: Sequence[int], encoding: str) -> list[str]:
    try:
        from attnlab.tokenizer import token_labels

        return token_labels([int(t) for t in token_ids], encoding)
    except Exception:  # an encoding that cannot be loaded offline: show ids
        return [f"#{int(t)}" for t in token_ids]


def last_attention(run_dir: Path, encoding: str = "gpt2") -> tuple[np.ndarray, list[str], int | None] | None:
    """``(weights (T, T) float64, token labels, step)`` at the last snapshot of ``run_dir``:
    from ``attention.npz`` (heads averaged; only the last frame is read) or, for a walkthrough,
    ``walkthrough.npz`` (step None). None when the run has neither or no snapshot."""
    run_dir = Path(run_dir)
    if (run_dir / artifacts.ATTENTION).is_file():
        last = artifacts.read_last_snapshot(run_dir)
        if last is None:
            return None
        labels = [str(t) for t in artifacts.read_attention(run_dir, keys=("tokens",))["tokens"]]
        return head_mean(last[1]), labels, last[0]
    if (run_dir / artifacts.WALKTHROUGH).is_file():
        with np.load(run_dir / artifacts.WALKTHROUGH) as npz:
            return head_mean(npz["weights"]), _labels(npz["token_ids"], encoding), None
    return None


def focus_at_last_snapshot(run_dir: Path, focus: int, encoding: str = "gpt2") -> dict[str, Any]:
    """The focus token's strongest target at the last snapshot of ``run_dir`` (see
    :func:`last_attention`). Returns ``focus_token``, ``focus_target`` (token labels),
    ``focus_weight`` (float in [0, 1]) and ``snapshot_step`` (None for a walkthrough); {} when
    there is no snapshot or ``focus`` is outside [0, T)."""
    last = last_attention(run_dir, encoding)
    if last is None:
        return {}
    w, labels, step = last
    if not isinstance(focus, int) or not 0 <= focus < w.shape[0]:
        return {}
    j = int(np.argmax(w[focus]))
    return {"focus_token": labels[focus], "focus_target": labels[j], "focus_weight": float(w[focus, j]),
            "snapshot_step": step}


def job_row(run_dir: Path, job: str | None = None, sweep_end: bool = False) -> dict[str, Any]:
    """One table row for ``run_dir`` (keys: :data:`COLUMNS`, observation columns it has,
    ``path``). Never raises for a broken run: what cannot be read is left empty and said in
    ``error``. ``sweep_end``: the sweep is over, so a ``running`` summary means the job died."""
    run_dir = Path(run_dir)
    cfg = _load_yaml(run_dir / ".hydra" / "config.yaml")
    overrides = _load_yaml(run_dir / ".hydra" / "overrides.yaml")
    row: dict[str, Any] = {c: None for c in COLUMNS}
    row["job"] = job if job is not None else run_dir.name
    row["overrides"] = " ".join(str(o) for o in overrides) if isinstance(overrides, list) else ""
    threshold = _select(cfg, "train.loss_threshold")
    row["loss_threshold"] = threshold
    try:
        summary = artifacts.read_summary(run_dir)
    except (OSError, ValueError) as err:
        summary = {}
        row["error"] = f"summary.json unreadable: {err}"
    if not summary:
        row["status"] = "missing"
        row["error"] = row["error"] or "no summary.json (the job did not start, or died before writing it)"
    else:
        row["status"] = summary.get("status")
        row["error"] = summary.get("error")
        if sweep_end and row["status"] == "running":
            row["error"] = "the job ended without a final status (killed or crashed)"
    for key in ("final_loss", "steps_run", "steps_to_threshold", "wall_time_s"):
        row[key] = summary.get(key)
    if row["steps_to_threshold"] is None and threshold and (run_dir / artifacts.METRICS).is_file():
        try:
            _, losses = artifacts.read_metrics(run_dir)
            below = np.flatnonzero(losses < float(threshold))
            row["steps_to_threshold"] = int(below[0]) if below.size else None
        except (AttnlabError, ValueError, IndexError):
            pass
    focus = _select(cfg, "train.focus_token", 1)
    encoding = _select(cfg, "tokenizer.encoding", "gpt2")
    try:
        row.update(focus_at_last_snapshot(run_dir, focus, str(encoding)))
    except (AttnlabError, OSError, ValueError, KeyError) as err:
        row["error"] = row["error"] or f"attention unreadable: {err}"
    row.update(exercises.columns(summary))
    row["path"] = str(run_dir)
    return row


def collect_rows(paths: Iterable[Path], sweep_end: bool = False) -> list[dict[str, Any]]:
    """Rows for every run under ``paths`` (see :func:`find_runs`), in PATH order, then by
    Hydra job number, then folder name. ``job`` is each run's folder relative to the common
    parent of all PATHs (the folder name for a single sweep). Raises RunDirError for a PATH
    that is not a run/sweep dir."""
    paths = [Path(p) for p in paths]
    found: list[tuple[int, Path]] = []
    for i, p in enumerate(paths):
        found.extend((i, r) for r in find_runs(p))
    if not found:
        return []
    resolved = [r.resolve() for _, r in found]
    if len(paths) == 1 and not _is_job_dir(paths[0]):
        base = paths[0].resolve()
    else:
        base = Path(os.path.commonpath([str(r) for r in resolved]))
        if len(resolved) == 1 or base in resolved:
            base = base.parent
    keyed = []
    for (i, r), res in zip(found, resolved):
        num = _job_num(r)
        keyed.append(((i, num if num is not None else math.inf, r.name), r, res))
    keyed.sort(key=lambda k: k[0])
    return [job_row(r, job=str(res.relative_to(base)), sweep_end=sweep_end) for _, r, res in keyed]
