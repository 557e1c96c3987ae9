"""The data of ``attnlab-report``'s page: one record per run, from its files (:func:`load_run`) or from what
the run just made holds (:func:`run_record`), with attnlab-compare's row, text ``printable`` (:data:`MAX_STR`),
configs cut at :data:`MAX_NODES` values. The runs share :data:`WEIGHT_BUDGET` bytes of weights JSON
(:func:`pick_frames`); loss curves are thinned to :data:`MAX_LOSS_POINTS`, keeping every shown snapshot's step."""
from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from attnlab.core.config import loss_name
from attnlab.core.files import PAGE_WEIGHT_BUDGET as WEIGHT_BUDGET  # bytes of weights JSON on a page, for all runs
from attnlab.core.files import page_frame_bytes as frame_bytes  # JSON bytes of one (H, T, T) snapshot, at most
from attnlab.core.focus import FocusSink, Uniform
from attnlab.core.i18n import _
from attnlab.core.records import RunInfo, Sink, Snapshot
from attnlab.outputs.console import generation_lines
from attnlab.outputs.plots import pick_snapshots
from attnlab.saved import runs, safe_read, table
from attnlab.saved.columns import OBSERVED
from attnlab.saved.safe_read import ATTENTION, METRICS, WALKTHROUGH, RunFileError, printable
from attnlab.saved.swept import LINESTYLES, run_labels, run_styles
from attnlab.saved.verdict import verdict_text

DECIMALS = 4  # of a weight on the page (core.files.PAGE_BYTES_PER_WEIGHT)
MAX_LOSS_POINTS = 2000  # loss curve points per run on the page
NPZ_LIMIT = safe_read.NPZ_LIMIT  # bytes: an archive read for a report, and its members' declared data
MAX_STR = 2000  # characters of any one string put on the page (config values, errors), escapes included
MAX_NODES = 20_000  # values of one config/summary put on the page
# summary.json fields a record has its own place for; the others go to ``recorded``
_KNOWN_SUMMARY = {"status", "task", "started_at", "final_loss", "steps_run", "wall_time_s", "error",
                  "versions", "steps_to_threshold", "token_table", "config", "overrides"}


def pick_frames(n: int, budget: int, fbytes: int) -> list[int]:
    """Indices of the snapshots of ``fbytes`` each to show out of ``n`` within ``budget`` bytes: evenly spaced,
    first and last kept; only the last when one fits, none when none does (the page says it shows 0 of ``n``)."""
    k = budget // max(fbytes, 1)
    return _thin(n, k).tolist() if k >= 2 else [n - 1] if k == 1 and n else []


def _snapshot_bytes(npz: safe_read.NpzArchive) -> int:
    """JSON bytes of one snapshot of attention.npz ``npz``: every head, and a GPT's every block's."""
    _S, H, T, _ = npz.shapes["weights"]
    return frame_bytes(H * (1 + (npz.shapes["layers"][1] if "layers" in npz.shapes else 0)), T)


def weight_need(run_dir: Path, root: Path | None = None) -> int:
    """JSON bytes all of ``run_dir``'s snapshots would take (0 without any); reads only headers."""
    with contextlib.suppress(RunFileError):  # load_run says what is wrong
        if safe_read.exists(run_dir, ATTENTION):
            with safe_read.open_attention(run_dir, NPZ_LIMIT, root=root) as npz:
                return npz.shapes["weights"][0] * _snapshot_bytes(npz)
    return 0


def share_budget(needs: Sequence[int], budget: int = WEIGHT_BUDGET) -> list[int]:
    """Split ``budget`` among runs needing ``needs`` bytes: equal shares, unused share passed on."""
    out = [0] * len(needs)
    todo = sorted((i for i in range(len(needs)) if needs[i] > 0), key=lambda i: needs[i])
    left = budget
    for n, i in enumerate(todo):
        out[i] = min(needs[i], left // (len(todo) - n))
        left -= out[i]
    return out


def _rounded(w: np.ndarray) -> list:
    """(k, H, T, T) weights as nested lists, rounded, clipped to [0, 1], non-finite as None."""
    w = np.clip(np.round(np.asarray(w, dtype=np.float64), DECIMALS), 0.0, 1.0)
    finite = np.isfinite(w)
    return w.tolist() if finite.all() else np.where(finite, w, None).tolist()


def _thin(n: int, k: int, keep: Iterable[int] = ()) -> np.ndarray:
    """At most about ``k`` of ``n`` indices, evenly spaced (:func:`pick_snapshots`), first, last and ``keep`` kept."""
    return np.asarray(sorted(set(pick_snapshots(range(n), k)) | {i for i in keep if 0 <= i < n}), dtype=np.int64)


def _finite_or_none(values: Iterable[float]) -> list[float | None]:
    return [float(v) if math.isfinite(v) else None for v in values]


def _jsonable(value: Any, budget: list[int] | None = None) -> Any:
    """JSON data: text printable, non-finite floats as "nan"/"inf"/"-inf", at most :data:`MAX_NODES`
    values (the rest "…"; safe_read bounds the depth)."""
    budget = [MAX_NODES] if budget is None else budget
    budget[0] -= 1
    if budget[0] < 0:
        return "…"
    value = value.item() if isinstance(value, np.generic) else value
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else "inf" if value > 0 else "-inf"
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, (dict, list, tuple)):
        pairs = [(printable(k, MAX_STR), v) for k, v in value.items()] if isinstance(value, dict) else enumerate(value)
        out: dict[Any, Any] = {}
        for k, v in pairs:
            if budget[0] < 0:
                out["…" if isinstance(value, dict) else len(out)] = "…"
                break
            out[k] = _jsonable(v, budget)
        return out if isinstance(value, dict) else list(out.values())
    return printable(value, MAX_STR)


def _record(run_dir: Path, name: str | None) -> dict[str, Any]:
    """A record's fields that :func:`_fill` may leave as they are (it sets the others)."""
    return {"name": printable(name if name is not None else run_dir.name, MAX_STR),
            "run_dir": printable(run_dir, MAX_STR), "kind": None, "tokens": [], "token_ids": [], "steps": [],
            "snapshots_total": 0, "weights": [], "heads": 0, "focus": None, "focus_series": None}


def load_run(run_dir: Path | str, name: str | None = None, max_weight_bytes: int = WEIGHT_BUDGET, *,
             files: runs.RunFiles | None = None) -> dict[str, Any]:
    """One run dir (``files``: its :func:`runs.read_run`) as the page's record (:func:`_record`'s fields,
    docs/reference.md), read as attnlab-compare reads it (someone else's run); never raises."""
    files = files or runs.read_run(Path(run_dir))
    run_dir, rec = files.run_dir, _record(files.run_dir, name)
    metrics = attention = None  # the snapshots as attnlab-compare reads them, from the arrays read here
    if not files.linked:  # nothing read through a link
        metrics = (files.attempt(safe_read.read_run_metrics, run_dir, root=files.root)
                   if safe_read.exists(run_dir, METRICS) else None)
        if safe_read.exists(run_dir, ATTENTION):
            attention = files.attempt(_load_attention, rec, run_dir, files.root, max_weight_bytes)
        elif safe_read.exists(run_dir, WALKTHROUGH):
            walk = files.attempt(safe_read.read_walkthrough, run_dir, NPZ_LIMIT, root=files.root,
                                 keys=("weights", "token_ids"))
            attention = walk and _walkthrough(rec, walk, files.config)
    return _fill(rec, files, name, metrics, attention)


def run_record(run_dir: Path, summary: dict[str, Any], losses: np.ndarray | None = None,
               page: PageSink | None = None, focus: FocusSink | None = None,
               walkthrough: dict[str, np.ndarray] | None = None, name: str | None = None) -> dict[str, Any]:
    """:func:`load_run`'s record of the run attnlab is making in ``run_dir``, from what it holds, nothing read back:
    its ``summary``, ``losses`` (steps,), the snapshots ``page`` kept and ``focus`` saw, or the ``walkthrough``."""
    summary = json.loads(json.dumps(summary, ensure_ascii=False))  # as summary.json holds it
    files = runs.RunFiles(Path(run_dir), Path(run_dir), summary=summary, status=summary.get("status"),
                          config=summary.get("config") or {}, overrides=summary.get("overrides") or [], held=True)
    rec = _record(files.run_dir, name)
    metrics = None if losses is None else (np.arange(len(losses), dtype=np.int64), np.asarray(losses, np.float64))
    if walkthrough is not None:
        return _fill(rec, files, name, metrics, _walkthrough(rec, walkthrough, files.config))
    _snapshots(rec, np.asarray(page.steps, dtype=np.int64), list(page.info.tokens), page.info.token_ids, page.heads,
               page.indices, np.stack(page.frames) if page.frames else None,
               np.stack(page.layer_frames) if page.layer_frames else None)
    return _fill(rec, files, name, metrics, None, focus if page.frames else None)


class PageSink(Sink):
    """What the run's own page shows of its snapshots (:func:`run_record`), kept as the run goes: every
    snapshot's step and copies of the frames :func:`pick_frames` picks (a GPT's every block too)."""

    def on_start(self, info: RunInfo) -> None:
        model = info.config.get("model") or {}
        self.info, self.heads, layers = info, int(model.get("n_heads") or 1), int(model.get("n_layers") or 0)
        self.indices = pick_frames(len(info.snapshot_steps), WEIGHT_BUDGET,
                                   frame_bytes(self.heads * (1 + layers), info.seq_len))
        self.steps: list[int] = []
        self.frames: list[np.ndarray] = []  # (H, T, T) each
        self.layer_frames: list[np.ndarray] = []  # (L, H, T, T) each

    def on_snapshot(self, snapshot: Snapshot) -> None:
        if len(self.steps) in self.indices:
            self.frames.append(np.array(snapshot.weights))
            if snapshot.layers is not None:
                self.layer_frames.append(np.array(snapshot.layers))
        self.steps.append(snapshot.step)


def _fill(rec: dict[str, Any], files: runs.RunFiles, name: str | None, metrics: tuple[np.ndarray, np.ndarray] | None,
          attention: Any, sink: FocusSink | None = None) -> dict[str, Any]:
    """``rec`` completed from the run's files as read (or held), the losses ``metrics`` and attnlab-compare's
    row (:func:`runs.row_from` of the ``attention`` or the focus ``sink``)."""
    summary, used = files.summary, files.config
    rec["status"] = _jsonable(files.status)
    shown = used
    if summary.get("config") is None:  # Hydra's file: plain ${a.b} looked up, the rest shown as text
        with contextlib.suppress(RunFileError):
            shown = safe_read.resolve_references(used)
    if shown.get("text_file"):  # a run that read a file never used its sentence
        shown = {k: v for k, v in shown.items() if k != "sentence"}
    rec["config"] = _jsonable(shown)
    rec["overrides"] = _jsonable(files.overrides)
    rec["versions"] = _jsonable(summary.get("versions") or {})
    rec["recorded"] = _jsonable({k: v for k, v in summary.items() if k not in _KNOWN_SUMMARY})
    kind = summary.get("task") or safe_read.select(used, "task")
    rec["kind"] = rec["kind"] or (kind if kind in ("train", "walkthrough") else None)  # walkthrough.npz: its kind
    row = runs.row_from(files, name, read=False, metrics=metrics, attention=attention, focus=sink)
    rec["table"] = table.page_cells(row)
    rec["observations"] = observations(rec["table"], summary)
    rec["loss_name"] = loss_name([row["objective"]]) if "objective" in row else None  # a linked run: none
    for key in ("final_loss", "steps_run", "wall_time_s", "steps_to_threshold"):  # the row's numbers
        rec[key] = _jsonable(row[key])
    threshold = runs.as_float(row["loss_threshold"] or math.nan)
    rec["loss_threshold"] = threshold if math.isfinite(threshold) and threshold > 0 else None  # a log axis' line

    steps, losses = metrics if metrics is not None else (np.zeros(0, dtype=np.int64), np.zeros(0))
    at = {int(s): i for i, s in enumerate(steps.tolist())}
    rec["snapshot_loss"] = _finite_or_none([losses[at[s]] if s in at else math.nan for s in rec["steps"]])
    idx = _thin(int(steps.size), MAX_LOSS_POINTS, [at[s] for s in rec["steps"] if s in at])
    rec["loss"] = {"steps": steps[idx].tolist(), "values": _finite_or_none(losses[idx]), "total": int(steps.size)}

    if rec["steps"] and row.get("focus_curve"):  # the focus weight at every snapshot, beside the frames shown
        rec["focus_series"] = {"steps": list(row["focus_curve"][0]), "weights": _finite_or_none(row["focus_curve"][1])}
    focus = runs.setting(used, "train.focus_token", int, 1)
    rec["focus_token"] = focus if 0 <= focus < len(rec["tokens"]) else None
    if row.get("focus_token") is not None:  # the row's focus cells: attnlab-compare's, weight unrounded
        rec["focus"] = {"token": printable(row["focus_token"], MAX_STR),
                        "target": printable(row["focus_target"], MAX_STR),
                        "weight": _jsonable(row["focus_weight"]), "step": row["snapshot_step"],
                        "uniform": isinstance(row["focus_target"], Uniform)}
    rec["problems"] = [printable(p, MAX_STR) for p in files.problems]
    rec["error"] = _jsonable(row["error"])
    return rec


def observations(cells: dict[str, dict[str, Any]], summary: dict[str, Any]) -> list[dict[str, str]]:
    """What the run measured, as a learner reads it (``title``, ``text``): the exercise observations' table
    cells (:mod:`attnlab.saved.columns`), a GPT's validation loss and its continuation of the prompt."""
    out = [{"title": table.header(c), "text": cells[c].get("full") or cells[c]["text"]}
           for c in OBSERVED if c in cells and cells[c]["text"] != "-"]
    if isinstance(summary.get("val_loss"), (int, float)) and not isinstance(summary.get("val_loss"), bool):
        out.append({"title": _("validation loss"), "text": f"{summary['val_loss']:.4f}"})
    if isinstance(generation := summary.get("generation"), dict):
        with contextlib.suppress(KeyError, TypeError, ValueError):  # an edited summary.json: its raw data stays
            text = "\n".join(printable(line, MAX_STR) for line in generation_lines(generation))
            out.append({"title": _("continuation"), "text": text})
    return out


def _load_attention(rec: dict[str, Any], run_dir: Path, root: Path, max_weight_bytes: int) -> Any:
    """:func:`_snapshots` of attention.npz (the frames that fit ``max_weight_bytes``); its snapshots as
    :func:`runs.saved_attention` (None when no frame fits)."""
    with safe_read.open_attention(run_dir, NPZ_LIMIT, root=root) as npz:
        steps = npz.read("steps")
        labels = [str(t) for t in npz.read("tokens").tolist()]
        idx = pick_frames(steps.size, max_weight_bytes, _snapshot_bytes(npz))
        weights = npz.read("weights") if idx else None
        layers = npz.read("layers")[idx] if idx and "layers" in npz.shapes else None
        _snapshots(rec, steps, labels, npz.read("token_ids"), npz.shapes["weights"][1], idx,
                   None if weights is None else weights[idx], layers)
    return None if weights is None else (steps, weights, labels)


def _snapshots(rec: dict[str, Any], steps: np.ndarray, labels: list[str], token_ids: Any, heads: int,
               idx: list[int], frames: np.ndarray | None, layers: np.ndarray | None) -> None:
    """Fill ``rec``'s tokens and snapshots: ``steps`` (S,) of all, ``frames`` (k, H, T, T) and a GPT's ``layers``
    (k, L, H, T, T) at ``idx``."""
    rec["tokens"] = [printable(t, MAX_STR) for t in labels]
    rec["token_ids"] = [int(i) for i in np.asarray(token_ids).tolist()]
    rec["snapshots_total"], rec["heads"] = int(steps.size), heads
    if frames is None:
        return
    rec["weights"] = _rounded(frames)
    if layers is not None:  # a GPT: every block's, for the layer selector and grid
        rec["layers"] = _rounded(layers)
    rec["steps"] = [int(steps[i]) for i in idx]


def _walkthrough(rec: dict[str, Any], walk: dict[str, np.ndarray], config: Any) -> tuple[None, np.ndarray, list[str]]:
    """Fill ``rec`` from the walkthrough's (T, T) ``weights``; returns them as :func:`runs.saved_attention`."""
    rec["kind"] = "walkthrough"
    labels = runs.token_labels_for(walk["token_ids"], runs.setting(config, "tokenizer.encoding", str, "gpt2"))
    weights = walk["weights"][None, None]
    _snapshots(rec, np.zeros(1, dtype=np.int64), labels, walk["token_ids"], 1, [0], weights, None)
    return None, weights, labels


def collect_records(paths: Iterable[Path | str], *, found: list[tuple[Path, str, Path]] | None = None,
                    against: Any = None, verdicts: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """:func:`load_run` of every run under ``paths`` (or ``found``), named as attnlab-compare names them, with a
    legend ``label`` and ``differs``, the keys whose values differ from ``against`` (a whole config) or else from
    most runs; with ``verdicts`` (job -> attnlab-reproduce's row) each run's verdict, the runs sorted by student
    (``name``, then job). Raises RunDirError."""
    found = runs.named_runs(Path(p) for p in paths) if found is None else found
    shares = share_budget([weight_need(r, files.root) for r, _, files in found])
    records = [load_run(r, name, share, files=files) for (r, name, files), share in zip(found, shares)]
    rows = [{"job": name, "override_list": files.overrides} for _r, name, files in found]  # attnlab-compare's
    for rec, label in zip(records, run_labels(rows)):  # attnlab-compare --plot's legends: "3: lr=0.05"
        rec["label"] = printable(label, MAX_STR)
    dashes = dict(zip(LINESTYLES, ("", "6.7 2.9", "1.8 3", "11.5 2.9 1.8 2.9")))  # the page's DASHES
    for rec, style in zip(records, run_styles(rows) or []):
        rec["style"] = {"color": style["color"], "dash": dashes[style["linestyle"]]}
    configs = [files.config for _r, _name, files in found]  # as attnlab-compare reads them
    for rec, keys in zip(records, runs.differs(configs, against)):
        rec["differs_keys"], rec["differs"] = list(keys), runs.differs_text(keys)
        rec["table"]["differs"] = table.page_cell("differs", rec["differs"])
    if verdicts is None:
        return records
    for rec, row in zip(records, rows):
        rec["verdict"] = verdict_text(verdicts.get(row["job"]))
        rec["table"]["verdict"] = table.page_cell("verdict", rec["verdict"])
    student = {id(rec): runs.setting(config, "name", str, None) for rec, config in zip(records, configs)}
    return sorted(records, key=lambda rec: (student[id(rec)] is None, student[id(rec)] or "", rec["name"]))
