"""The data of ``attnlab-report``'s page (:mod:`attnlab.saved.report` renders it): one JSON-ready
record per run (:func:`load_run`), built from the same :func:`attnlab.saved.runs.read_run` and row
as attnlab-compare's, the runs under some PATHs (:func:`collect_records`), and the downsampling
that keeps a page in budget.

Every file is read through :mod:`attnlab.saved.safe_read`; every string put on the page goes
through :func:`~attnlab.saved.safe_read.printable` (at most :data:`MAX_STR` characters) and a
record holds at most :data:`MAX_NODES` values of config and summary. A damaged run is a record
whose ``error`` and ``problems`` name the file; the rest of the page is written.

Budget: the weights of all runs on one page share :data:`WEIGHT_BUDGET` bytes of JSON (the rest
of the 20 MB page budget holds the template, tokens, losses and configs). A weight rounded to 4
decimals takes at most 7 bytes (``0.1234,``), a snapshot at most :func:`frame_bytes`; a run whose
snapshots do not all fit keeps ``max(2, share // frame_bytes)`` of them, evenly spaced, first and
last kept (:func:`pick_frames`); e.g. 1,000 snapshots at T = 256: 39 of them, ~11 MB. Loss curves
longer than :data:`MAX_LOSS_POINTS` are thinned alike, keeping the loss at every shown snapshot.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from attnlab.core.config import loss_name
from attnlab.core.records import head_mean
from attnlab.saved import runs, safe_read, table
from attnlab.saved.safe_read import ATTENTION, METRICS, WALKTHROUGH, RunFileError, printable
from attnlab.saved.swept import run_labels, short_names

WEIGHT_BUDGET = 18_000_000  # bytes of weights JSON on one page, shared by its runs
BYTES_PER_WEIGHT = 7  # upper bound of one weight in JSON: "0.1234," (rounded to 4 decimals)
DECIMALS = 4
MIN_FRAMES = 2  # first and last snapshot, whatever the budget
MAX_LOSS_POINTS = 2000  # loss curve points per run on the page
NPZ_LIMIT = safe_read.NPZ_LIMIT  # bytes: an archive read for a report, and its members' declared data
MAX_STR = 2000  # characters of any one string put on the page (config values, errors), escapes included
MAX_NODES = 20_000  # values of one config/summary put on the page
MAX_DEPTH = 32

# summary.json fields a record has its own place for; the others go to ``recorded``
_KNOWN_SUMMARY = {"status", "task", "started_at", "final_loss", "steps_run", "wall_time_s", "error",
                  "versions", "steps_to_threshold", "token_table", "config", "overrides"}


# ============================================================================ downsampling
def frame_bytes(H: int, T: int) -> int:
    """Upper bound of the JSON bytes of one snapshot (H, T, T) rounded to :data:`DECIMALS`."""
    return H * T * (BYTES_PER_WEIGHT * T + 2) + 2 * H + 2


def pick_frames(n: int, budget: int, fbytes: int) -> list[int]:
    """Indices of the snapshots to show out of ``n``: all when they fit in ``budget`` bytes
    (``fbytes`` each), else ``max(2, budget // fbytes)`` evenly spaced, first and last kept."""
    if n <= 0:
        return []
    k = max(MIN_FRAMES, budget // max(fbytes, 1))
    if n <= k:
        return list(range(n))
    return sorted({int(i) for i in np.round(np.linspace(0, n - 1, k))})


def weight_need(run_dir: Path, root: Path | None = None) -> int:
    """JSON bytes all of ``run_dir``'s snapshots would take on the page (0 when there are none
    or they cannot be read); reads only the archive's directory and ``.npy`` headers."""
    if not safe_read.exists(run_dir, ATTENTION):
        return 0
    try:
        with safe_read.open_attention(run_dir, NPZ_LIMIT, root=root) as npz:
            S, H, T, _ = npz.infos["weights"].shape
    except RunFileError:  # load_run says what is wrong
        return 0
    return S * frame_bytes(H, T)


def share_budget(needs: Sequence[int], budget: int = WEIGHT_BUDGET) -> list[int]:
    """Split ``budget`` bytes among runs needing ``needs`` bytes (0: no attention.npz): equal
    shares, and what a run needs less than its share goes to the others (water filling)."""
    out = [0] * len(needs)
    todo = sorted((i for i in range(len(needs)) if needs[i] > 0), key=lambda i: needs[i])
    left = budget
    for n, i in enumerate(todo):
        out[i] = min(needs[i], left // (len(todo) - n))
        left -= out[i]
    return out


def _rounded(w: np.ndarray) -> list:
    """(k, H, T, T) weights as nested lists rounded to :data:`DECIMALS`, clipped to [0, 1];
    non-finite values (a diverged run) as None."""
    w = np.clip(np.round(np.asarray(w, dtype=np.float64), DECIMALS), 0.0, 1.0)
    finite = np.isfinite(w)
    if finite.all():
        return w.tolist()
    out = np.where(finite, w, 0.0).astype(object)
    out[~finite] = None
    return out.tolist()


def _thin(n: int, k: int, keep: Iterable[int] = ()) -> np.ndarray:
    """Indices of at most about ``k`` of ``n`` points, evenly spaced, first/last and ``keep`` kept."""
    if n <= k:
        return np.arange(n)
    idx = set(np.round(np.linspace(0, n - 1, k)).astype(int).tolist())
    idx.update(i for i in keep if 0 <= i < n)
    return np.asarray(sorted(idx), dtype=np.int64)


def _finite_or_none(values: Iterable[float]) -> list[float | None]:
    return [float(v) if math.isfinite(v) else None for v in values]


# ============================================================================ text and config
def _jsonable(value: Any, budget: list[int] | None = None, depth: int = 0) -> Any:
    """Plain JSON data from YAML/JSON/numpy data: keys and strings :func:`~attnlab.saved.safe_read.printable`
    (at most :data:`MAX_STR` characters), non-finite floats as "nan"/"inf"/"-inf", at most
    :data:`MAX_NODES` values and :data:`MAX_DEPTH` levels (the rest becomes "…")."""
    budget = [MAX_NODES] if budget is None else budget
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_DEPTH:
        return "…"
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        v = float(value)
        return v if math.isfinite(v) else ("nan" if math.isnan(v) else "inf" if v > 0 else "-inf")
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if budget[0] < 0:
                out["…"] = "…"
                break
            out[printable(k, MAX_STR)] = _jsonable(v, budget, depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        items: list[Any] = []
        for v in value:
            if budget[0] < 0:
                items.append("…")
                break
            items.append(_jsonable(v, budget, depth + 1))
        return items
    return printable(value, MAX_STR)


# ============================================================================ one run
def load_run(run_dir: Path | str, name: str | None = None, max_weight_bytes: int = WEIGHT_BUDGET, *,
             root: Path | None = None) -> dict[str, Any]:
    """One run dir as the page's run record (JSON-ready; DESIGN.md's contract and more):
    ``name``, ``run_dir``, ``status`` and ``error`` (as attnlab-compare's row), ``problems`` (one
    line per file that cannot be read), ``kind`` (train, walkthrough), ``tokens`` [T],
    ``token_ids`` [T], ``steps`` [k] (the snapshot steps shown), ``snapshots_total`` (n),
    ``weights`` k x H x T x T (rounded to 4 decimals, None where not finite), ``heads`` (H),
    ``snapshot_loss`` [k], ``loss`` {``steps``, ``values``, ``total``}, ``loss_name``,
    ``loss_threshold``, ``steps_to_threshold``, ``final_loss``, ``steps_run``, ``wall_time_s``
    (seconds), ``focus_token`` (position), ``focus`` {``token``, ``target``, ``weight``, ``step``}
    (the row's focus cells), ``config`` (the config the run used: summary.json's, else
    ``.hydra/config.yaml`` with plain references looked up), ``overrides``, ``versions``,
    ``recorded`` (the other summary.json fields), ``table`` (the row's cells,
    :func:`attnlab.saved.table.page_cells`). ``max_weight_bytes``: see :func:`pick_frames`.
    Never raises for a damaged run."""
    run_dir = Path(run_dir)
    rec: dict[str, Any] = {
        "name": printable(name if name is not None else run_dir.name, MAX_STR), "run_dir": printable(run_dir, MAX_STR),
        "status": None, "error": None, "problems": [], "kind": None, "tokens": [], "token_ids": [], "steps": [],
        "snapshots_total": 0, "weights": [], "heads": 0, "snapshot_loss": [],
        "loss": {"steps": [], "values": [], "total": 0}, "loss_name": None, "loss_threshold": None,
        "steps_to_threshold": None,
        "final_loss": None, "steps_run": None, "wall_time_s": None, "focus_token": None, "focus": None,
        "config": {}, "overrides": [], "versions": {}, "recorded": {}, "table": {},
    }
    files = runs.read_run(run_dir, root)  # as attnlab-compare reads it: the row below is its row
    if files.linked:  # nothing read through a link
        row = runs.row_from(files, name, metrics=None, last=None)
        return {**rec, "status": "unreadable", "error": files.problems[0], "problems": files.problems,
                "table": table.page_cells(row)}
    summary, used = files.summary, files.used_config
    rec["status"] = _jsonable(files.status)
    try:  # Hydra's file of an older run: its plain ${a.b} references looked up, anything else shown as text
        shown = used if used is not files.config else safe_read.resolve_references(used)
    except RunFileError:
        shown = used
    rec["config"] = _jsonable(shown)
    rec["overrides"] = _jsonable(files.overrides)
    rec["versions"] = _jsonable(summary.get("versions") or {})
    rec["recorded"] = _jsonable({k: v for k, v in summary.items() if k not in _KNOWN_SUMMARY})
    kind = summary.get("task") or safe_read.select(used, "task")
    rec["kind"] = kind if kind in ("train", "walkthrough") else None
    rec["loss_name"] = loss_name([files.objective])
    focus = runs.setting(used, "train.focus_token", int, 1)
    steps = losses = metrics = None
    if safe_read.exists(run_dir, METRICS):
        metrics = files.attempt(safe_read.read_run_metrics, run_dir, root=files.root)
        if metrics is not None:
            steps, losses = metrics
            rec["loss"]["total"] = int(steps.size)

    last = None  # the last snapshot as attnlab-compare reads it (runs.last_attention), from the frames read here
    if safe_read.exists(run_dir, ATTENTION):
        last = files.attempt(_load_attention, rec, run_dir, files.root, max_weight_bytes)
    elif safe_read.exists(run_dir, WALKTHROUGH):
        last = files.attempt(_load_walkthrough, rec, run_dir, files.root,
                             runs.setting(used, "tokenizer.encoding", str, "gpt2"))
    # attnlab-compare's row from the files read above (it adds the expected files that are missing)
    row = runs.row_from(files, name, metrics=metrics, last=last)
    rec["table"] = table.page_cells(row)
    for key in ("final_loss", "steps_run", "wall_time_s", "steps_to_threshold"):  # the row's numbers
        rec[key] = _jsonable(row[key])
    threshold = runs.as_float(row["loss_threshold"]) if row["loss_threshold"] is not None else math.nan
    rec["loss_threshold"] = threshold if math.isfinite(threshold) and threshold > 0 else None  # a log axis' line

    if steps is not None and steps.size:
        at = {int(s): i for i, s in enumerate(steps.tolist())}
        keep = [at[s] for s in rec["steps"] if s in at]
        idx = _thin(int(steps.size), MAX_LOSS_POINTS, keep)
        rec["loss"]["steps"] = steps[idx].tolist()
        rec["loss"]["values"] = _finite_or_none(losses[idx].tolist())
        rec["snapshot_loss"] = [(_finite_or_none([losses[at[s]]])[0] if s in at else None) for s in rec["steps"]]
    else:
        rec["snapshot_loss"] = [None] * len(rec["steps"])

    T = len(rec["tokens"])
    rec["focus_token"] = focus if focus is not None and 0 <= focus < T else None
    if row.get("focus_token") is not None:  # the row's focus cells: attnlab-compare's, weight unrounded
        rec["focus"] = {"token": printable(row["focus_token"], MAX_STR),
                        "target": printable(row["focus_target"], MAX_STR),
                        "weight": _jsonable(row["focus_weight"]), "step": row["snapshot_step"]}
    rec["problems"] = [printable(p, MAX_STR) for p in files.problems]
    rec["error"] = _jsonable(row["error"])
    return rec


def _load_attention(rec: dict[str, Any], run_dir: Path, root: Path,
                    max_weight_bytes: int) -> tuple[np.ndarray, list[str], int] | None:
    """Fill ``rec``'s snapshots from attention.npz; returns the last snapshot as
    :func:`attnlab.saved.runs.last_attention` does (its (T, T) head mean unrounded, the token labels
    as read, its step), None without snapshots."""
    with safe_read.open_attention(run_dir, NPZ_LIMIT, root=root) as npz:
        steps = npz.read("steps")
        labels = [str(t) for t in npz.read("tokens").tolist()]
        rec["tokens"] = [printable(t, MAX_STR) for t in labels]
        rec["token_ids"] = [int(i) for i in npz.read("token_ids").tolist()]
        S, H, T, _ = npz.infos["weights"].shape
        rec["snapshots_total"], rec["heads"] = S, H
        idx = pick_frames(S, max_weight_bytes, frame_bytes(H, T))
        if idx:
            frames = npz.read("weights")[idx]  # the last snapshot among them (pick_frames keeps it)
            rec["weights"] = _rounded(frames)
            rec["steps"] = [int(steps[i]) for i in idx]
            return head_mean(frames[-1]), labels, int(steps[-1])
    return None


def _load_walkthrough(rec: dict[str, Any], run_dir: Path, root: Path,
                      encoding: Any) -> tuple[np.ndarray, list[str], None]:
    """Fill ``rec`` from walkthrough.npz; returns it as :func:`attnlab.saved.runs.last_attention` does
    (its (T, T) weights unrounded, the token labels, step None)."""
    walk = safe_read.read_walkthrough(run_dir, NPZ_LIMIT, root=root, keys=("weights", "token_ids"))
    rec["kind"] = "walkthrough"
    rec["token_ids"] = [int(i) for i in walk["token_ids"].tolist()]
    labels = runs.token_labels_for(rec["token_ids"], encoding)
    rec["tokens"] = [printable(t, MAX_STR) for t in labels]
    rec["snapshots_total"], rec["heads"] = 1, 1
    rec["steps"] = [0]
    rec["weights"] = _rounded(walk["weights"][None, None])
    return head_mean(walk["weights"]), labels, None


# ============================================================================ many runs
def collect_records(paths: Iterable[Path | str], budget: int = WEIGHT_BUDGET, *,
                    found: list[tuple[Path, str, Path]] | None = None) -> list[dict[str, Any]]:
    """One record (:func:`load_run`) per run under ``paths``, in the order and with the names of
    attnlab-compare's rows (:func:`attnlab.saved.runs.named_runs`, or ``found`` when the caller
    has it), ``label`` a short legend name; the runs share ``budget`` bytes of weights
    (:func:`share_budget`). Raises RunDirError for a PATH that is not a run or sweep dir."""
    found = runs.named_runs(Path(p) for p in paths) if found is None else found
    shares = share_budget([weight_need(r, root) for r, _, root in found], budget)
    records = [load_run(r, name=name, max_weight_bytes=share, root=root)
               for (r, name, root), share in zip(found, shares)]
    # the legend names of attnlab-compare --plot: job number and swept values, "3: lr=0.05"
    names = [name for _, name, _ in found]
    labelled = run_labels([{"job": name, "override_list": rec["overrides"]} for rec, name in zip(records, names)],
                          short_names(names))
    for rec, (short, values) in zip(records, labelled):
        rec["label"] = printable(f"{short}: {values}" if values else short, MAX_STR)
    return records
