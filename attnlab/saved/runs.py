"""Saved runs as rows (attnlab-compare, the sweep's end table, the report's runs table), read through
:mod:`attnlab.saved.safe_read`; cells hold text as read. Keys: :data:`attnlab.saved.columns.ROW_KEYS` (status
is summary.json's, or ``killed``, ``missing``, ``unreadable``; ``final_loss`` MSE or cross-entropy in nats;
focus cells at the last snapshot, heads averaged), the exercise observations, ``path`` and ``problems``."""
from __future__ import annotations

import contextlib
import json
import math
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from attnlab.core.config import select, walk
from attnlab.core.errors import RunDirError
from attnlab.core.focus import FocusSink, target
from attnlab.core.i18n import _
from attnlab.core.records import RunInfo, Snapshot, head_mean
from attnlab.core.tokenizer import SHIPPED_ENCODINGS, token_labels
from attnlab.outputs import rundir
from attnlab.saved import safe_read
from attnlab.saved.columns import ROW_KEYS, observed_cells
from attnlab.saved.safe_read import ATTENTION, CONFIG, METRICS, SUMMARY, WALKTHROUGH, MissingRunFile, RunFileError

MAX_DEPTH = 6  # folders below a PATH searched for runs (outputs/multirun/NAME/DATE/TIME/JOB is 5)
NO_SUMMARY = "no summary.json (the job did not start, or died before writing it)"
DIED = "the job ended without a final status (killed or crashed)"
RAN = ("completed", "diverged", "interrupted")  # statuses whose training wrote its artifacts
STATUSES = ("running", *RAN, "failed")  # what attnlab writes into summary.json


def is_job_dir(path: Path) -> bool:
    """A run dir: it has ``.hydra/config.yaml`` or ``summary.json`` in any form."""
    return os.path.lexists(path / CONFIG) or os.path.lexists(path / SUMMARY)


def find_runs(path: Path) -> list[Path]:
    """``[path]`` for a run dir, else the run dirs at most :data:`MAX_DEPTH` levels below it (a
    linked folder is listed, not entered). Raises RunDirError when there is none."""
    path = Path(path)
    shown = safe_read.printable(str(path), 300)
    if not path.is_dir():
        raise RunDirError(f"{shown}: " + ("not a run dir or sweep dir (not a directory)" if path.exists()
                                          else "no such file or directory"))
    if is_job_dir(path):
        return [path]
    found = []
    for dirpath, dirnames, _files in os.walk(path):
        here = Path(dirpath)
        if len(here.relative_to(path).parts) > MAX_DEPTH:
            dirnames[:] = []
        elif here != path and is_job_dir(here):
            found.append(here)
            dirnames[:] = []
        else:
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            found.extend(here / d for d in dirnames if (here / d).is_symlink() and is_job_dir(here / d))
    if not found:
        raise RunDirError(_("{path}: not a run dir or sweep dir (no .hydra/config.yaml in it or below it)").format(
            path=shown))
    return found


@dataclass
class RunFiles:
    """What a run dir says about itself (:func:`read_run`): ``config`` is summary.json's, else
    ``.hydra/config.yaml`` (nothing resolved); ``root``: no link followed below it; ``linked``: nothing read;
    ``held``: a run's own records in memory (:func:`attnlab.saved.report_data.run_record`), no file looked at."""

    run_dir: Path
    root: Path
    summary: dict[str, Any] = field(default_factory=dict)
    status: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    overrides: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    linked: bool = False
    held: bool = False

    def attempt(self, read: Callable[..., Any], *args: Any, missing_ok: bool = False, **kwargs: Any) -> Any:
        """``read(*args, **kwargs)``, or None with its RunFileError added to :attr:`problems`."""
        try:
            return read(*args, **kwargs)
        except RunFileError as err:
            if not (missing_ok and isinstance(err, MissingRunFile)):
                self.problems.append(safe_read.file_problem(err, self.run_dir))
        return None


def read_run(run_dir: Path, root: Path | None = None) -> RunFiles:
    """summary.json, the config and the overrides of ``run_dir``; never raises."""
    run_dir = Path(run_dir)
    files = RunFiles(run_dir, Path(root) if root is not None else run_dir)
    parts = run_dir.relative_to(files.root).parts
    link = next(("/".join(parts[:i]) for i in range(1, len(parts) + 1) if files.root.joinpath(*parts[:i]).is_symlink()),
                None)  # the first folder below root that is a link
    if link is not None:
        files.status, files.linked = "unreadable", True
        files.problems.append(f"{safe_read.printable(link, 300)}: is a symbolic link (refused: nothing in a "
                              "sweep dir is read through a link)")
        return files
    live = rundir.run_is_live(run_dir)  # before summary.json: a run that ends meanwhile is not "killed"
    try:
        files.summary = safe_read.read_summary(run_dir, root=files.root)
        files.status = files.summary.get("status")
        if files.status == "running" and not live:
            files.status = "killed"
        elif files.status not in STATUSES:
            files.problems.append(f"{SUMMARY}: unknown status {safe_read.printable(repr(files.status), 60)} "
                                  f"(attnlab writes {', '.join(STATUSES)})")
    except MissingRunFile:
        files.status = "missing"
        files.problems.append(NO_SUMMARY)
    except RunFileError as err:
        files.status = "unreadable"
        files.problems.append(safe_read.file_problem(err, run_dir))
    files.config = (files.summary.get("config")  # read_summary: a dict or null
                    or files.attempt(safe_read.read_config, run_dir, root=files.root, resolve=False, missing_ok=True)
                    or {})
    files.overrides = (files.summary["overrides"] if "overrides" in files.summary  # read_summary: a list
                       else files.attempt(safe_read.read_overrides, run_dir, root=files.root, missing_ok=True) or [])
    return files


def _job_num(files: RunFiles) -> int | float:
    """The job's number (summary.json, hydra.yaml, else the folder name's, else inf), only to order rows."""
    num = files.summary.get("job_num")
    if num is None:
        with contextlib.suppress(RunFileError):
            num = safe_read.read_job_num(files.run_dir, root=files.root)
    head = files.run_dir.name.split("_", 1)[0]
    return num if num is not None else int(head) if head.isdigit() else math.inf


def token_labels_for(token_ids: Sequence[int], encoding: Any) -> list[str]:
    """Labels for token ids read from a run: a shipped encoding's, else ``#id``."""
    if encoding in SHIPPED_ENCODINGS:
        try:
            return token_labels([int(t) for t in token_ids], encoding)
        except Exception:  # an id outside the vocabulary: tiktoken's errors vary
            pass
    return [f"#{int(t)}" for t in token_ids]


def saved_attention(run_dir: Path, encoding: str = "gpt2", *,
                    root: Path | None = None) -> tuple[np.ndarray | None, np.ndarray, list[str]] | None:
    """``(steps (S,), weights (S, H, T, T), token labels)`` of attention.npz, or ``(None, weights
    (1, 1, T, T), labels)`` of walkthrough.npz; None without either or without a snapshot. Raises RunFileError."""
    if safe_read.exists(run_dir, ATTENTION):
        att = safe_read.read_attention(run_dir, ("steps", "weights", "tokens"), root=root)
        return (att["steps"], att["weights"], [str(t) for t in att["tokens"].tolist()]) if att["steps"].size else None
    if safe_read.exists(run_dir, WALKTHROUGH):
        walk = safe_read.read_walkthrough(run_dir, root=root, keys=("weights", "token_ids"))
        return None, walk["weights"][None, None], token_labels_for(walk["token_ids"], encoding)
    return None


def setting(config: Any, key: str, kind: type | tuple[type, ...], default: Any) -> Any:
    """``config[key]`` (dotted) when of type ``kind`` (not a bool), else ``default``."""
    value = safe_read.select(config, key, default)
    return value if isinstance(value, kind) and not isinstance(value, bool) else default


def as_float(value: int | float) -> float:
    """A number read from a run as a float (an int too large for one as ±inf)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def broken(row: dict[str, Any]) -> bool:
    """Whether some file of the row's run cannot be read."""
    return bool(row.get("problems"))


def job_row(run_dir: Path, job: str | None = None, sweep_end: bool = False, *,
            root: Path | None = None) -> dict[str, Any]:
    """The row of ``run_dir``; never raises. ``sweep_end``: a ``running`` summary means the job died."""
    return row_from(read_run(Path(run_dir), root), job, sweep_end=sweep_end)


def row_from(files: RunFiles, job: str | None = None, *, sweep_end: bool = False, read: bool = True,
             metrics: tuple[np.ndarray, np.ndarray] | None = None, attention: Any = None,
             focus: FocusSink | None = None) -> dict[str, Any]:
    """:func:`job_row` from a :func:`read_run`. ``read=False``: the caller read the ``metrics`` and the
    ``attention`` (:func:`saved_attention`), or holds a ``focus`` that saw every snapshot. Never raises."""
    run_dir, summary, config = files.run_dir, files.summary, files.config
    row: dict[str, Any] = dict.fromkeys(ROW_KEYS)
    row.update(job=job if job is not None else run_dir.name, path=str(run_dir), root=str(files.root),  # root: no column
               status=files.status)
    if files.linked:
        return {**row, "error": files.problems[0], "problems": files.problems}
    try:
        row["overrides"] = " ".join(files.overrides)
        row["name"], row["notes"] = (setting(config, key, str, None) for key in ("name", "notes"))
        row["config"] = config  # not a column: what differs (differs)
        row["override_list"] = files.overrides  # not a column: the swept values of a figure's titles
        threshold = row["loss_threshold"] = setting(config, "train.loss_threshold", (int, float), None)
        row["objective"] = select(config, "train.objective")  # names the loss axes (not a column)
        row.update({k: summary.get(k) for k in ("final_loss", "steps_run", "steps_to_threshold", "wall_time_s")})
        if read:
            metrics = (files.attempt(safe_read.read_run_metrics, run_dir, root=files.root)
                       if safe_read.exists(run_dir, METRICS) else None)
            attention = files.attempt(saved_attention, run_dir, setting(config, "tokenizer.encoding", str, "gpt2"),
                                      root=files.root)
        row["metrics"] = metrics  # not a column: the loss curve (attnlab-compare --plot, the report)
        if metrics is not None:  # the data, not summary.json's claims about it
            steps, losses = metrics
            below = np.flatnonzero(losses < as_float(threshold)) if threshold else ()
            row.update(final_loss=float(losses[-1]) if len(losses) else None, steps_run=len(steps),
                       steps_to_threshold=int(steps[below[0]]) if len(below) else None)
        query = row["focus_query"] = setting(config, "train.focus_token", int, 1)  # not a column
        if attention is not None:  # not a column: the last snapshot's heatmap (step, (T, T) heads averaged, labels)
            steps, weights, labels = attention
            row["heatmap"] = None if steps is None else int(steps[-1]), head_mean(weights[-1]), labels
        if attention is not None and 0 <= query < len(labels) and steps is None:  # the walkthrough's (1, 1, T, T)
            to, weight = target(row["heatmap"][1][query], labels)
            row.update(focus_token=labels[query], focus_target=to, focus_weight=weight)
        elif attention is not None and 0 <= query < len(labels):  # a FocusSink that sees every snapshot
            focus = FocusSink()
            focus.on_start(RunInfo({}, [], labels, [], 0, query))
            for step, w in zip(steps.tolist(), weights):
                focus.on_snapshot(Snapshot(step, math.nan, w))
        recorded = None
        if focus is not None:  # the focus cells at the last snapshot (heads averaged)
            to, weight = target(head_mean(focus.last)[focus.query], focus.tokens)
            row.update(focus_token=focus.tokens[focus.query], focus_target=to, focus_weight=weight,
                       snapshot_step=int(focus.steps[-1]))
            row["focus_curve"] = focus.steps, [float(s[-1]) for s in focus.series]  # not a column: (S,) each
            recorded = focus.summary()["focus"]
        if (summary.get("task") or safe_read.select(config, "task")) == "walkthrough":  # the artifacts it must have
            expected = [WALKTHROUGH] if files.status == "completed" else []
        else:  # read_summary: steps_run an int
            expected = [METRICS, ATTENTION] if files.status in RAN and (summary.get("steps_run") or 0) > 0 else []
        missing = [] if files.held else [name for name in expected if not safe_read.exists(run_dir, name)]
        files.problems.extend(f"{name}: missing" for name in missing)
        row.update(observed_cells({**summary, "focus": recorded}))
        died = files.status == "killed" or (sweep_end and files.status == "running")
        row["error"] = "; ".join(x for x in [DIED if died else summary.get("error"), *files.problems] if x) or None
        row["problems"] = files.problems
    except Exception as err:  # a defect of attnlab's, not of the run: still a row, naming it
        row["status"] = row["status"] or "unreadable"
        row["problems"] = [f"cannot be read ({type(err).__name__}: {safe_read.printable(str(err), 300)})"]
        row["error"] = row["problems"][0]
    return row


def named_runs(paths: Iterable[Path]) -> list[tuple[Path, str, RunFiles]]:
    """``(run dir, name relative to the PATHs' common parent, its :func:`read_run` below its PATH)`` for
    every run, ordered by PATH, job number, folder name. Raises RunDirError."""
    paths = [Path(p) for p in paths]
    found = [(i, r) for i, p in enumerate(paths) for r in find_runs(p)]
    if not found:
        return []
    resolved = [paths[i].resolve() / r.relative_to(paths[i]) for i, r in found]  # links below a PATH kept
    if len(paths) == 1 and not is_job_dir(paths[0]):
        base = paths[0].resolve()
    else:
        base = Path(os.path.commonpath([str(r) for r in resolved]))
        if len(resolved) == 1 or base in resolved:
            base = base.parent
    named = [(i, r, str(res.relative_to(base)), read_run(r, paths[i])) for (i, r), res in zip(found, resolved)]
    return [run[1:] for run in sorted(named, key=lambda run: (run[0], _job_num(run[3]), run[1].name))]


def collect_rows(paths: Iterable[Path], sweep_end: bool = False, against: dict | None = None,
                 found: list[tuple[Path, str, RunFiles]] | None = None) -> list[dict[str, Any]]:
    """The rows of every run under ``paths`` (``found``: their :func:`named_runs`, already read), ``differs``
    filled in (``against`` a config). Raises RunDirError."""
    found = named_runs(paths) if found is None else found
    rows = [row_from(files, name, sweep_end=sweep_end) for _r, name, files in found]
    for row, keys in zip(rows, differs([r.get("config") or {} for r in rows], against)):
        row["differs"] = differs_text(keys)
    return rows


LABELS = ("name", "notes", "lang")  # a run's label and language: never what differs


def config_values(config: Any) -> dict[str, str]:
    """``{dotted key: value as typed}`` of a config's values (a list is one; text as is, others as JSON: ``0.05``,
    ``true``, ``[0,5]``), not :data:`LABELS` nor ``logging.*``."""
    return {k: v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, separators=(",", ":"))
            for k, v in walk(config) if k and "[" not in k and not isinstance(v, dict) and k not in LABELS
            and not k.startswith("logging.")}


def differs(configs: Sequence[Any], against: Any = None) -> list[dict[str, str]]:
    """Per config, ``{key: value as typed}`` of the keys whose value differs from ``against``'s (a whole config),
    else from the value most of ``configs`` share (shared by more than one and by more than any other
    value; without one every config's value is shown). ``?``: unset; a run without a config: {}."""
    values = [config_values(c) for c in configs]
    have = [v for v in values if v]
    base = config_values(against) if against is not None else None
    out: list[dict[str, str]] = [{} for _config in configs]
    for key in dict.fromkeys(k for v in [*have, base or {}] for k in v):
        if base is not None:
            usual = base.get(key, "?")
        else:
            (usual, n), *rest = Counter(v.get(key, "?") for v in have).most_common()
            usual = usual if n > 1 and (not rest or rest[0][1] < n) or not rest else None
        for i, v in enumerate(values):
            if v and v.get(key, "?") != usual:
                out[i][key] = v.get(key, "?")
    return out


def differs_text(keys: dict[str, str]) -> str | None:
    """One run's :func:`differs` as ``key=value key=value``; None for none."""
    return " ".join(f"{k}={v}" for k, v in keys.items()) or None
