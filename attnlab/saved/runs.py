"""Saved runs read back into rows: finding run dirs under a path, and one table row per run.

Shared by ``attnlab-compare`` (:mod:`attnlab.commands.compare`), the end-of-sweep table
(:mod:`attnlab.commands.sweep`) and the report, so all of them always agree. A row is built from the
run's own files only (``summary.json``, ``metrics.csv``, ``attention.npz`` or
``walkthrough.npz``, ``.hydra/``), every one read through :mod:`attnlab.saved.safe_read` (bounded, no
symbolic links, data only: nothing resolved or instantiated). Cells hold the text as read; the
table, the CSV and the report make it printable (:func:`attnlab.saved.safe_read.printable`).

Row keys (:data:`COLUMNS`, then the exercise observations a row has, :data:`attnlab.core.exercises.COLUMNS`):

- ``job``: the run's folder relative to the common parent of the PATHs (a sweep job's folder
  name, e.g. ``0_model.d_model=6``); ``overrides``: its command-line overrides, space-separated;
- ``status``: completed, diverged, interrupted, failed, running (summary.json), ``killed``
  (summary.json says running but no process holds the run's lock, :func:`attnlab.outputs.rundir.run_is_live`),
  ``missing`` (no summary.json) or ``unreadable`` (a summary.json that cannot be used: not a regular file,
  too large, not JSON, a field of the wrong type); ``error``: the one-line message of a run
  that did not complete, then one line per file that cannot be read (``; ``-joined, each
  ``<file>: <what is wrong>``, e.g. ``attention.npz: damaged archive (BadZipFile: ...)``);
- ``final_loss`` (the run's objective: MSE, no unit, or with ``train.objective=next_token``
  cross-entropy in nats), ``steps_run``, ``steps_to_threshold`` (first step whose loss
  is below ``loss_threshold`` = the run's ``train.loss_threshold``; empty if never);
- ``focus_token``, ``focus_target``, ``focus_weight``, ``snapshot_step``: at the last attention
  snapshot, the token the focus token (``train.focus_token``) attends to most and that weight
  (for ``task=walkthrough``: the walkthrough's single set of weights, snapshot_step empty);
- ``wall_time_s``: seconds the run took (training loop, or the whole walkthrough);
- ``path``: the run dir; ``problems`` (not a column): the files that cannot be read, one line
  each. A row with problems is *broken* (:func:`broken`).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from attnlab.core import exercises
from attnlab.core.config import objective_of
from attnlab.core.errors import RunDirError
from attnlab.core.records import head_mean
from attnlab.outputs import rundir
from attnlab.saved import safe_read
from attnlab.saved.safe_read import ATTENTION, CONFIG, METRICS, WALKTHROUGH, MissingRunFile, RunFileError

COLUMNS = ["job", "overrides", "status", "final_loss", "steps_run", "steps_to_threshold", "loss_threshold",
           "focus_token", "focus_target", "focus_weight", "snapshot_step", "wall_time_s", "error"]
MAX_DEPTH = 6  # folders below a PATH searched for runs (outputs/multirun/NAME/DATE/TIME/JOB is 5)
NO_SUMMARY = "no summary.json (the job did not start, or died before writing it)"
DIED = "the job ended without a final status (killed or crashed)"
RAN = ("completed", "diverged", "interrupted")  # statuses whose training wrote its artifacts
STATUSES = ("running", *RAN, "failed")  # what attnlab writes into summary.json
SHIPPED_ENCODINGS = ("gpt2", "r50k_base")  # token ids of a walkthrough are labelled only with these (offline)


def is_job_dir(path: Path) -> bool:
    """A run (or sweep-job) dir: Hydra's saved config, or attnlab's summary.json (which holds
    the resolved config, so runs made with ``hydra.output_subdir=null`` are found too), in any
    form: a link or a FIFO there is found, then refused when read (a row saying so)."""
    return os.path.lexists(path / CONFIG) or os.path.lexists(path / safe_read.SUMMARY)


def find_runs(path: Path) -> list[Path]:
    """Run dirs at or under ``path``: ``[path]`` for a run dir, else every folder at most
    :data:`MAX_DEPTH` levels below it holding ``.hydra/config.yaml`` or ``summary.json`` (not
    looking inside those; a folder that is a symbolic link is not entered, and listed when it
    points at a run: :func:`read_run` refuses it). Raises RunDirError when ``path`` does not
    exist or holds no run."""
    path = Path(path)
    if not path.exists():
        raise RunDirError(f"{safe_read.printable(str(path), 300)}: no such file or directory")
    if not path.is_dir():
        raise RunDirError(f"{safe_read.printable(str(path), 300)}: not a run dir or sweep dir (not a directory)")
    if is_job_dir(path):
        return [path]
    found = []
    for dirpath, dirnames, _ in os.walk(path):
        here = Path(dirpath)
        if len(here.relative_to(path).parts) > MAX_DEPTH:
            dirnames[:] = []
            continue
        if here != path and is_job_dir(here):
            found.append(here)
            dirnames[:] = []
            continue
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        # a job folder that is a symbolic link is never entered, but listed: its row says so
        found.extend(here / d for d in dirnames if (here / d).is_symlink() and is_job_dir(here / d))
    if not found:
        raise RunDirError(f"{safe_read.printable(str(path), 300)}: not a run dir or sweep dir "
                          "(no .hydra/config.yaml in it or below it)")
    return found


@dataclass
class RunFiles:
    """What a run dir says about itself, read as bounded data; :func:`read_run` never raises.

    ``summary``: summary.json ({} when missing or unreadable); ``status``: its status,
    ``killed`` (it says running and no process holds the lock), ``missing`` or ``unreadable``;
    ``config``: the resolved config summary.json recorded, else ``.hydra/config.yaml`` as plain
    data ({} when neither can be read; nothing in it resolved; :func:`saved_config` reads
    Hydra's file whatever summary.json has);
    ``overrides``: summary.json's, else ``.hydra/overrides.yaml``'s; ``problems``: one line per
    file that cannot be read (``<file>: <what is wrong>``, the file relative to ``run_dir``).
    ``root``: the folder from which no symbolic link is followed."""

    run_dir: Path
    root: Path
    summary: dict[str, Any] = field(default_factory=dict)
    status: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    overrides: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    linked: bool = False  # reached through a symbolic link below ``root``: nothing in it is read

    @property
    def used_config(self) -> dict[str, Any]:
        """The config the run used: summary.json's (resolved) when it has one, else :attr:`config`
        (``.hydra/config.yaml`` as plain data); what a row's settings (threshold, focus token,
        encoding) are read from, whichever config the caller shows."""
        recorded = self.summary.get("config")
        return recorded if isinstance(recorded, dict) else self.config

    @property
    def objective(self) -> Any:
        """``train.objective`` of the config the run used (summary.json's), else of the saved
        one (:func:`attnlab.core.config.objective_of`): what attnlab-compare and attnlab-report name
        the loss from, whichever config they show."""
        return objective_of(self.used_config)

    def attempt(self, read: Callable[..., Any], *args: Any, missing_ok: bool = False, **kwargs: Any) -> Any:
        """``read(*args, **kwargs)``, or None with its RunFileError added to :attr:`problems`
        (a missing file too, unless ``missing_ok``)."""
        try:
            return read(*args, **kwargs)
        except RunFileError as err:
            if not (missing_ok and isinstance(err, MissingRunFile)):
                self.problems.append(safe_read.file_problem(err, self.run_dir))
        return None

    @property
    def task(self) -> str:
        """``train`` or ``walkthrough``: summary.json's ``task``, else the config's."""
        task = self.summary.get("task") or safe_read.select(self.used_config, "task")
        return task if task in ("train", "walkthrough") else "train"

    def expected_files(self) -> list[str]:
        """The artifacts a run with this status must have: a training run that took steps
        its ``metrics.csv`` and ``attention.npz``, a completed walkthrough ``walkthrough.npz``."""
        if self.task == "walkthrough":
            return [WALKTHROUGH] if self.status == "completed" else []
        steps = self.summary.get("steps_run")
        return [METRICS, ATTENTION] if self.status in RAN and isinstance(steps, int) and steps > 0 else []


def read_run(run_dir: Path, root: Path | None = None) -> RunFiles:
    """summary.json, the config and the overrides of ``run_dir`` (see :class:`RunFiles`);
    never raises: what cannot be read is a line of ``problems``."""
    run_dir = Path(run_dir)
    files = RunFiles(run_dir, Path(root) if root is not None else run_dir)
    link = _link_below(files.root, run_dir)
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
        elif files.status not in STATUSES:  # a string, but not one attnlab writes: the file was edited
            files.problems.append(f"{safe_read.SUMMARY}: unknown status {safe_read.printable(repr(files.status), 60)} "
                                  f"(attnlab writes {', '.join(STATUSES)})")
    except MissingRunFile:
        files.status = "missing"
        files.problems.append(NO_SUMMARY)
    except RunFileError as err:
        files.status = "unreadable"
        files.problems.append(safe_read.file_problem(err, run_dir))
    recorded = files.summary.get("config") if isinstance(files.summary.get("config"), dict) else None
    config = recorded
    if config is None:
        config = files.attempt(safe_read.read_config, run_dir, root=files.root, resolve=False, missing_ok=True)
    files.config = config if config is not None else {}
    overrides = files.summary.get("overrides")
    if not isinstance(overrides, list):
        overrides = files.attempt(safe_read.read_overrides, run_dir, root=files.root, missing_ok=True)
    files.overrides = overrides or []
    return files


def saved_config(files: RunFiles) -> tuple[dict[str, Any], list[str]]:
    """The config as Hydra saved it (``.hydra/config.yaml`` as plain data, nothing resolved),
    else the one the run recorded (:attr:`RunFiles.used_config`), and the problem reading it
    (``[]`` or one line): what attnlab-report shows. Read apart from ``files`` so that a
    damaged ``.hydra/config.yaml``, which attnlab-compare does not read when summary.json has
    the config, is not a problem of the run's row. Never raises."""
    if not isinstance(files.summary.get("config"), dict) or files.linked:  # read_run read it (or nothing is read)
        return files.config, []
    try:
        saved = safe_read.read_config(files.run_dir, root=files.root, resolve=False)
    except MissingRunFile:
        return files.config, []
    except RunFileError as err:
        return files.config, [safe_read.file_problem(err, files.run_dir)]
    return (saved if isinstance(saved, dict) else files.config), []


def _link_below(root: Path, run_dir: Path) -> str | None:
    """The first folder from ``root`` (excluded) down to ``run_dir`` that is a symbolic link,
    relative to ``root``, or None."""
    try:
        parts = run_dir.relative_to(root).parts
    except ValueError:
        return None
    for i in range(1, len(parts) + 1):
        if (root.joinpath(*parts[:i])).is_symlink():
            return "/".join(parts[:i])
    return None


def _job_num(run_dir: Path, root: Path | None = None) -> int | None:
    """The sweep job's number: ``job_num`` of ``summary.json`` (a sweep's jobs, since 2026-11-30; reading
    it takes ~0.2 ms), else ``hydra.job.num`` of ``.hydra/hydra.yaml`` (~19 ms), else the number
    a job folder's name starts with; only orders the rows, so a file that cannot be read is no
    problem of the row."""
    num = None
    try:
        num = safe_read.read_summary(run_dir, root=root).get("job_num")
    except RunFileError:
        pass
    if num is None:
        try:
            num = safe_read.read_job_num(run_dir, root=root)
        except RunFileError:
            num = None
    if num is not None:
        return num
    head = run_dir.name.split("_", 1)[0]
    return int(head) if head.isdigit() else None


def token_labels_for(token_ids: Sequence[int], encoding: Any) -> list[str]:
    """Readable labels for token ids read from a run (``tokenizer.token_labels``) with a shipped
    encoding (:data:`SHIPPED_ENCODINGS`: nothing is downloaded because a run's config names an
    encoding), else ``#id``."""
    if encoding in SHIPPED_ENCODINGS:
        try:
            from attnlab.core.tokenizer import token_labels

            return token_labels([int(t) for t in token_ids], encoding)
        except Exception:  # an id outside the vocabulary: tiktoken's errors vary
            pass
    return [f"#{int(t)}" for t in token_ids]


def last_attention(run_dir: Path, encoding: str = "gpt2", *,
                   root: Path | None = None) -> tuple[np.ndarray, list[str], int | None] | None:
    """``(weights (T, T) float64, token labels, step)`` at the last snapshot of ``run_dir``:
    from ``attention.npz`` (heads averaged; only the steps, the tokens and the last frame are
    read) or, for a walkthrough, ``walkthrough.npz`` (step None). None when the run has neither
    or no snapshot. Raises RunFileError (one line naming the file) for a damaged archive."""
    run_dir = Path(run_dir)
    if safe_read.exists(run_dir, ATTENTION):
        with safe_read.open_attention(run_dir, root=root) as npz:
            steps = npz.read("steps")
            if not steps.size:
                return None
            labels = [str(t) for t in npz.read("tokens").tolist()]
            return head_mean(npz.read_frame("weights", -1)), labels, int(steps[-1])
    if safe_read.exists(run_dir, WALKTHROUGH):
        walk = safe_read.read_walkthrough(run_dir, root=root, keys=("weights", "token_ids"))
        return head_mean(walk["weights"]), token_labels_for(walk["token_ids"], encoding), None
    return None


def _focus(last: tuple[np.ndarray, list[str], int | None] | None, focus: Any) -> dict[str, Any]:
    if last is None:
        return {}
    w, labels, step = last
    if not isinstance(focus, int) or isinstance(focus, bool) or not 0 <= focus < w.shape[0]:
        return {}
    j = int(np.argmax(w[focus]))
    return {"focus_token": labels[focus], "focus_target": labels[j], "focus_weight": float(w[focus, j]),
            "snapshot_step": step}


def focus_at_last_snapshot(run_dir: Path, focus: int, encoding: str = "gpt2", *,
                           root: Path | None = None) -> dict[str, Any]:
    """The focus token's strongest target at the last snapshot of ``run_dir`` (see
    :func:`last_attention`). Returns ``focus_token``, ``focus_target`` (token labels),
    ``focus_weight`` (float in [0, 1]) and ``snapshot_step`` (None for a walkthrough); {} when
    there is no snapshot or ``focus`` is outside [0, T). Raises RunFileError."""
    return _focus(last_attention(run_dir, encoding, root=root), focus)


def setting(config: Any, key: str, kind: type | tuple[type, ...], default: Any) -> Any:
    """``config[key]`` (dotted) when it is plain data of type ``kind`` (not a bool), else ``default``."""
    value = safe_read.select(config, key, default)
    return value if isinstance(value, kind) and not isinstance(value, bool) else default


def as_float(value: int | float) -> float:
    """A number read from a run dir as a float: an integer too large for one (summary.json may
    hold 10**400) as ±inf, where ``float()`` raises OverflowError."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def broken(row: dict[str, Any]) -> bool:
    """Whether some file of the row's run cannot be read (``row["problems"]``)."""
    return bool(row.get("problems"))


UNREAD: Any = object()  # row_from's ``metrics`` / ``last`` not read by the caller: the row reads them


def job_row(run_dir: Path, job: str | None = None, sweep_end: bool = False, *,
            root: Path | None = None) -> dict[str, Any]:
    """One table row for ``run_dir`` (keys: :data:`COLUMNS`, observation columns it has,
    ``path``, ``problems``). Never raises for a broken run: what cannot be read is left empty,
    named in ``error`` and listed in ``problems``. ``sweep_end``: the sweep is over, so a
    ``running`` summary means the job died. ``root``: the folder from which no symbolic link
    is followed (the PATH the run was found under; default ``run_dir``).

    The config and overrides come from summary.json (the resolved config the run used) or,
    for runs of older attnlab versions, from ``.hydra/`` read as plain YAML data: nothing in
    them is resolved or interpolated."""
    run_dir = Path(run_dir)
    try:
        files = read_run(run_dir, root)
    except Exception as err:  # a defect of attnlab's, not of the run: still a row, naming it
        return _unreadable(_empty_row(run_dir, job), err)
    return row_from(files, job, sweep_end=sweep_end)


def row_from(files: RunFiles, job: str | None = None, *, sweep_end: bool = False, metrics: Any = UNREAD,
             last: Any = UNREAD) -> dict[str, Any]:
    """:func:`job_row`'s row from a :func:`read_run` the caller made (attnlab-report's: the
    same cells as attnlab-compare's, from files read once). ``metrics``: ``(steps, losses)``
    as :func:`attnlab.saved.safe_read.read_run_metrics` gives them, or None (no usable metrics.csv);
    ``last``: what :func:`last_attention` gives, or None; either one :data:`UNREAD` (default):
    read here. Adds the missing expected files to ``files.problems``. Never raises."""
    row = _empty_row(files.run_dir, job)
    try:
        _fill_row(row, files, sweep_end, metrics, last)
    except Exception as err:  # a defect of attnlab's, not of the run: still a row, naming it
        _unreadable(row, err)
    return row


def _empty_row(run_dir: Path, job: str | None) -> dict[str, Any]:
    row: dict[str, Any] = {c: None for c in COLUMNS}
    row["job"] = job if job is not None else run_dir.name
    row["path"] = str(run_dir)
    return row


def _unreadable(row: dict[str, Any], err: Exception) -> dict[str, Any]:
    row["status"] = row["status"] or "unreadable"
    row["problems"] = [f"cannot be read ({type(err).__name__}: {safe_read.printable(str(err), 300)})"]
    row["error"] = row["problems"][0]
    return row


def _fill_row(row: dict[str, Any], files: RunFiles, sweep_end: bool, metrics: Any, last: Any) -> None:
    run_dir, summary, config = files.run_dir, files.summary, files.used_config
    row["status"] = files.status
    if files.linked:
        row["error"], row["problems"] = files.problems[0], files.problems
        return
    row["overrides"] = " ".join(files.overrides)
    threshold = setting(config, "train.loss_threshold", (int, float), None)
    row["loss_threshold"] = threshold
    row["objective"] = files.objective  # names the loss axes (not a column)
    for key in ("final_loss", "steps_run", "steps_to_threshold", "wall_time_s"):
        row[key] = summary.get(key)
    if metrics is UNREAD:
        metrics = (files.attempt(safe_read.read_run_metrics, run_dir, root=files.root)
                   if safe_read.exists(run_dir, METRICS) else None)
    if metrics is not None and row["steps_to_threshold"] is None and threshold:
        steps, losses = metrics
        below = np.flatnonzero(losses < as_float(threshold))
        row["steps_to_threshold"] = int(steps[below[0]]) if below.size else None
    if last is UNREAD:
        last = files.attempt(last_attention, run_dir, setting(config, "tokenizer.encoding", str, "gpt2"),
                             root=files.root)
    row.update(_focus(last, setting(config, "train.focus_token", int, 1)))
    files.problems.extend(f"{name}: missing" for name in files.expected_files()
                          if not safe_read.exists(run_dir, name))
    row.update(exercises.columns(summary))
    own = DIED if files.status == "killed" or (sweep_end and files.status == "running") else summary.get("error")
    row["error"] = "; ".join(x for x in [own, *files.problems] if x) or None
    row["problems"] = files.problems


def named_runs(paths: Iterable[Path]) -> list[tuple[Path, str, Path]]:
    """``(run dir, name, root)`` for every run under ``paths`` (see :func:`find_runs`), in PATH
    order, then by Hydra job number, then folder name. ``name`` is each run's folder relative to
    the common parent of all PATHs (the folder name for a single sweep); ``root`` is the PATH it
    was found under (the folder from which no symbolic link is followed). Raises RunDirError
    for a PATH that is not a run/sweep dir."""
    paths = [Path(p) for p in paths]
    found: list[tuple[int, Path]] = []
    for i, p in enumerate(paths):
        found.extend((i, r) for r in find_runs(p))
    if not found:
        return []
    resolved = [paths[i].resolve() / r.relative_to(paths[i]) for i, r in found]  # links below a PATH kept
    if len(paths) == 1 and not is_job_dir(paths[0]):
        base = paths[0].resolve()
    else:
        base = Path(os.path.commonpath([str(r) for r in resolved]))
        if len(resolved) == 1 or base in resolved:
            base = base.parent
    keyed = []
    for (i, r), res in zip(found, resolved):
        num = _job_num(r, root=paths[i])
        keyed.append(((i, num if num is not None else math.inf, r.name), r, str(res.relative_to(base)), paths[i]))
    keyed.sort(key=lambda k: k[0])
    return [(r, name, root) for _, r, name, root in keyed]


def collect_rows(paths: Iterable[Path], sweep_end: bool = False) -> list[dict[str, Any]]:
    """Rows for every run under ``paths`` (:func:`named_runs`: order, ``job`` names, the folder
    no symbolic link is followed from). Raises RunDirError for a PATH that is not a run/sweep
    dir; a run that cannot be read is a row (:func:`job_row`)."""
    return [job_row(r, job=name, sweep_end=sweep_end, root=root) for r, name, root in named_runs(paths)]
