"""``attnlab-reproduce``'s verdict: a run and its reproductions compared quantity by quantity (every
file attnlab writes into a run: every column of metrics.csv, every array of its archives, every value
summary.json records, and Hydra's copy of the config), and the verdict :func:`decide` draws from them."""
from __future__ import annotations

import contextlib
import csv
import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from attnlab.core.errors import AttnlabError
from attnlab.core.i18n import N_, _
from attnlab.outputs.artifacts import MODEL
from attnlab.saved import safe_read
from attnlab.saved.safe_read import printable

NOTE_LIMIT = 120  # characters of a note in the verdict table
MAX_ROWS = 20  # differences listed in the verdict table (the header counts them all)
RECORD_ONLY = ("started_at", "wall_time_s", "versions", "config", "overrides", "job_num", "reproduced_from")
METRIC_COLUMNS = ("step", "loss", "val_loss")  # metrics.csv's columns, as attnlab writes them
ATTENTION_NAMES = {"steps": "snapshot steps", "weights": "attention weights",
                   "layers": "attention weights (every block)"}
BITS = ("cpu_capability", "blas", "torch", "machine", "device")  # with torch_threads: what decides the bits
# what no floating-point rounding changes: the text's tokens, the steps, the files' columns, Hydra's copy of the config
NOT_ROUNDING = {"step", "snapshot steps", "tokens", "token_ids", "metrics.csv columns", ".hydra/config.yaml", "task",
                "n_tokens", "status", "steps_run", "shapes"}
# a verdict's English key (the CSV's data), translated where shown
VERDICTS = (N_("reproduced exactly"), N_("within rounding"), N_("not reproduced"), N_("undecided"),
            N_("interrupted"), N_("cannot be reproduced"))
EXACT, ROUNDING, DIFFERENT, UNDECIDED, INTERRUPTED, CANNOT = VERDICTS
REPRODUCED = (EXACT, ROUNDING)  # exit status 0
STOPPED = N_("the reproduction was stopped before its end (Ctrl-C or a signal): nothing decided")
_ABSENT = object()


@dataclass
class Difference:
    """One quantity that differs: first differing ``step``, ``max_abs_diff`` over shared steps, ``note``."""

    quantity: str
    step: int | None = None
    max_abs_diff: float | None = None
    note: str = ""

    @property
    def rounding_cannot(self) -> bool:
        """Whether no floating-point rounding can make this difference (a token, a step, a row count,
        a value attnlab does not compute, a shape, Hydra's copy of the config)."""
        base = self.quantity.split(".")[0].split("[")[0]
        return (self.quantity in NOT_ROUNDING or base in NOT_ROUNDING or " rows" in self.note
                or self.note.startswith(("shape ", "recorded, but not")))


@dataclass
class Rerun:
    """One reproduction of a run: its folder, the kernels torch used, that process's :data:`BITS`, its
    ``status``, what differs from the original, and the original's :func:`config_story`."""

    out: str
    kernels: str
    environment: dict[str, Any]
    status: str
    diffs: list[Difference] = field(default_factory=list)
    story: list[Difference] = field(default_factory=list)

    def made_like(self, versions: dict[str, Any]) -> bool:
        """Whether it ran where the recorded ``versions`` were made (every one of :data:`BITS`)."""
        return all(versions.get(k) == self.environment.get(k) for k in BITS)


@dataclass
class Verdict:
    """A run's verdict (``key`` one of :data:`VERDICTS`): the header's reason, the differences, the reproduction."""

    key: str
    why: str = ""
    diffs: list[Difference] = field(default_factory=list)
    out: str | None = None


def environment_differences(recorded: dict[str, Any] | None, current: dict[str, Any]) -> list[str]:
    """A warning line per key of the recorded ``versions`` that differs from ``current``."""
    if not recorded:
        return [_("warning: summary.json records no environment (versions); cannot check it matches")]
    return [_("warning: {key} differs: {then} when the run was made, {now} now").format(
            key=printable(key, 60), then=printable(recorded.get(key), 100), now=printable(current.get(key), 100))
            for key in sorted(set(recorded) | set(current), key=str) if recorded.get(key) != current.get(key)]


def _compare(name: str, a: np.ndarray, b: np.ndarray, steps: np.ndarray | None = None) -> Difference | None:
    """``a`` (original) against ``b`` along axis 0 (labelled by ``steps``): None when bitwise equal."""
    a, b = np.atleast_1d(a), np.atleast_1d(b)
    if a.shape[1:] != b.shape[1:]:
        return Difference(name, note=f"shape {a.shape} vs {b.shape}")
    n = min(len(a), len(b))
    x, y = a[:n], b[:n]
    same = (x == y) | (np.isnan(x) & np.isnan(y)) if x.dtype.kind == y.dtype.kind == "f" else x == y
    bad = np.flatnonzero(~np.asarray(same).all(axis=tuple(range(1, x.ndim))))
    label = (lambda i: int(steps[i]) if i < len(steps) else None) if steps is not None else (lambda i: None)
    if bad.size and {x.dtype.kind, y.dtype.kind} <= set("iuf"):
        diff = np.abs(x.astype(np.float64) - y.astype(np.float64))
        return Difference(name, label(bad[0]), float(np.nanmax(diff)) if np.isfinite(diff).any() else math.inf)
    if bad.size:
        return Difference(name, label(bad[0]), note=f"{printable(x.tolist()[:8], NOTE_LIMIT // 2)} vs "
                                                    f"{printable(y.tolist()[:8], NOTE_LIMIT // 2)}")
    return Difference(name, label(n), note=f"{len(a)} vs {len(b)} rows") if len(a) != len(b) else None


def _leaves(value: Any, name: str = "") -> Iterator[tuple[str, Any]]:
    """``(dotted name, value)`` of every value: dicts and lists of dicts are entered."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, f"{name}.{key}" if name else str(key))
    elif isinstance(value, list) and any(isinstance(item, dict) for item in value):
        for i, item in enumerate(value):
            yield from _leaves(item, f"{name}[{i}]")
    else:
        yield name, value


def _as_array(value: Any) -> np.ndarray | None:
    """A number, or nested lists of numbers, as an array; None for anything else (ragged lists too)."""
    with contextlib.suppress(ValueError, OverflowError):
        return a if (a := np.asarray(value)).dtype.kind in "iuf" else None


def _claims(original: dict[str, Any], reproduction: dict[str, Any]) -> list[Difference]:
    """Every value ``original``'s summary.json records (not :data:`RECORD_ONLY`) against the reproduction's."""
    ours = dict(_leaves({k: v for k, v in reproduction.items() if k not in RECORD_ONLY}))
    diffs = []
    for name, claimed in _leaves({k: v for k, v in original.items() if k not in RECORD_ONLY}):
        shown = printable(name, 60)
        if name not in ours:
            diffs.append(Difference(shown, note="recorded, but not a value attnlab computes"))
        elif (a := _as_array(claimed)) is not None and (b := _as_array(ours[name])) is not None:
            diffs.append(_compare(shown, a, b))
        elif claimed != ours[name]:
            diffs.append(Difference(shown, note=f"recorded {printable(claimed, 50)}, reproduced "
                                                f"{printable(ours[name], 50)}"))
    return [d for d in diffs if d is not None]


def metric_columns(run_dir: Path) -> dict[str, np.ndarray]:
    """Every column of ``metrics.csv`` (``step``, ``loss``, a GPT's ``val_loss``; an empty field is NaN) as
    float64. RunFileError for a column attnlab does not write or a field that is not a number."""
    path = Path(run_dir) / safe_read.METRICS
    text = safe_read.read_text(path, safe_read.METRICS_LIMIT, root=run_dir)
    header, *lines = [ln.rstrip("\r").split(",") for ln in text.split("\n") if ln.strip()] or [[]]
    if unknown := [c for c in header if c not in METRIC_COLUMNS]:
        raise safe_read.RunFileError(path, f"column {printable(unknown[0], 60)} is not one attnlab writes")
    columns = np.full((len(lines), len(header)), np.nan)
    for i, line in enumerate(lines):
        for j, value in enumerate(line[:len(header)]):
            try:
                columns[i, j] = float(value) if value.strip() else np.nan
            except ValueError:
                raise safe_read.RunFileError(path, f"line {i + 2}: {printable(value, 40)} is not a number") from None
    return {name: columns[:, j] for j, name in enumerate(header)}


def _archives(runs: tuple[Path, Path], name: str, members: dict[str, Any]) -> list[dict[str, np.ndarray]]:
    """Each run's archive ``name`` ({} where there is none); RunFileError for a member attnlab does not write."""
    return [safe_read.read_npz(Path(r) / name, members, root=r, strict=True) if safe_read.exists(r, name)
            else {} for r in runs]


def compare_runs(original: Path, reproduction: Path) -> list[Difference]:
    """What differs between two run dirs in every file attnlab writes into a run: every column of
    metrics.csv, every array of attention.npz (a GPT's ``layers`` too), model.npz or walkthrough.npz, then
    every value summary.json records; empty when bitwise identical. An interrupted ``original`` is compared
    over its own steps (its records only). Raises RunDirError (a member attnlab does not write too)."""
    pair = (original, reproduction)
    s_a, s_b = safe_read.read_summary(original), safe_read.read_summary(reproduction)
    prefix_only = s_a.get("status") == "interrupted"
    quantities: list[tuple[str, Any, Any, Any]] = []  # (name, original's, reproduction's, steps of axis 0)
    none = np.zeros(0)

    def rows(arrays: dict[str, np.ndarray], key: str) -> int | None:  # an interrupted original: its rows only
        return len(arrays.get(key, none)) if prefix_only else None

    if s_a.get("task") == "walkthrough" or safe_read.exists(original, safe_read.WALKTHROUGH):
        fa, fb = _archives(pair, safe_read.WALKTHROUGH, safe_read.WALKTHROUGH_MEMBERS)
        quantities += [(key, fa.get(key, none), fb.get(key, none), None)
                       for key in safe_read.WALKTHROUGH_MEMBERS if key in fa or key in fb]
    else:
        ma, mb = metric_columns(original), metric_columns(reproduction)
        if list(ma) != list(mb):
            quantities.append(("metrics.csv columns", np.array(list(ma)), np.array(list(mb)), None))
        aa, ab = _archives(pair, safe_read.ATTENTION, safe_read.ATTENTION_MEMBERS)
        steps = max(ma.get("step", none), mb.get("step", none), key=len).astype(np.int64)
        quantities += [(n, ma.get(n, none), mb.get(n, none)[:rows(ma, n)], None if n == "step" else steps)
                       for n in METRIC_COLUMNS if n in ma or n in mb]
        quantities += [(ATTENTION_NAMES.get(key, key), aa.get(key, none), ab.get(key, none)[:rows(aa, key)],
                        aa.get("steps") if key in ("weights", "layers") else None)
                       for key in safe_read.ATTENTION_MEMBERS if key in aa or key in ab]
        model = {}  # model.npz's members as the reproduction (attnlab itself) wrote them: name -> Member of that rank
        if (Path(reproduction) / MODEL).is_file():
            with np.load(Path(reproduction) / MODEL, allow_pickle=False) as arrays:  # attnlab's own, just written
                model = {n: safe_read.Member(tuple(f"{n}.{i}" for i in range(arrays[n].ndim)), "f")
                         for n in arrays.files}
        if model or safe_read.exists(original, MODEL):
            fa, fb = _archives(pair, MODEL, model)
            quantities += [(f"model {printable(key, 60)}", fa.get(key, none), fb.get(key, none), None)
                           for key in sorted(set(fa) | set(fb))]
    diffs = [d for name, a, b, steps in quantities if (d := _compare(name, a, b, steps)) is not None]
    return diffs + ([] if prefix_only else _claims(s_a, s_b))


RESOLVED_AT_START = ("train.snapshot_steps", "train.focus_token")  # null in Hydra's copy: the run resolves them


def config_story(run_dir: Path, recorded: dict[str, Any]) -> list[Difference]:
    """The run's ``.hydra/config.yaml`` (what ``--config-path`` re-runs) against the config summary.json
    ``recorded``, value by value (a :data:`RESOLVED_AT_START` key left null and a focus token given as text
    taken as the run resolved them; a resolver's value not compared): one Difference naming the keys that
    disagree, or why Hydra's copy cannot be read; [] when they agree or there is no ``.hydra/config.yaml``."""
    from attnlab.core import tokenizer
    from attnlab.core.config import apply_schema, literal

    try:
        hydra = safe_read.read_config(run_dir, resolve=False)
        with contextlib.suppress(AttnlabError):  # a resolver's value is left as text (not compared, below)
            hydra = safe_read.resolve_references(hydra, safe_read.CONFIG)
    except safe_read.MissingRunFile:
        return []
    except AttnlabError as err:
        return [Difference(safe_read.CONFIG, note=printable(f"cannot be read: {err}", NOTE_LIMIT))]
    a, b = dict(_leaves(hydra)), dict(_leaves(recorded))
    for key in RESOLVED_AT_START:
        if a.get(key) is None and key in b:
            a[key] = b[key]
    for key, value in list(a.items()):
        if isinstance(value, str) and "${" in value:  # a resolver Hydra ran (attnlab.per_head): its value is recorded
            a.pop(key), b.pop(key, None)
    if isinstance(a.get("train.focus_token"), str) and a.get("text_file") is None:
        with contextlib.suppress(AttnlabError):  # the position that text is in the run's sentence
            a["train.focus_token"] = tokenizer.tokenize(apply_schema(literal(hydra))).focus
    keys = [k for k in sorted(set(a) | set(b), key=str) if (x := a.get(k, _ABSENT)) != (y := b.get(k, _ABSENT))
            or isinstance(x, bool) != isinstance(y, bool)]
    if not keys:
        return []
    said, recorded_said = (", ".join(f"{k}={printable(d.get(k), 30)}" for k in keys[:3]) for d in (a, b))
    more = f" and {len(keys) - 3} more" if len(keys) > 3 else ""
    return [Difference(safe_read.CONFIG, note=printable(f"says {said}{more}; summary.json records {recorded_said}",
                                                        NOTE_LIMIT * 2))]


def decide(recorded: dict[str, Any], reruns: list[Rerun], extra: list[Difference] = ()) -> Verdict:
    """The verdict on a run that recorded the environment ``recorded`` (``versions``), from its reproductions
    here (``reruns``, the first on the recorded kernels or else this CPU's) and differences in the original
    alone (``extra``: Hydra's copy of the config). A reproduction in the recorded environment (:data:`BITS`)
    decides bit for bit; else identical to a kernel path here is ``within rounding``, a difference no rounding
    makes ``not reproduced``, any other ``undecided`` (that machine's rounding or an edit)."""
    if any(r.status == "interrupted" for r in reruns):
        return Verdict(INTERRUPTED, _(STOPPED), [], reruns[0].out)
    extra = list(extra)
    if (same := next((r for r in reruns if r.made_like(recorded)), None)) is not None:
        return Verdict(EXACT if not same.diffs and not extra else DIFFERENT, "", extra + same.diffs, same.out)
    first = reruns[0]
    if cannot := extra + [d for d in first.diffs if d.rounding_cannot]:
        return Verdict(DIFFERENT, "", cannot + [d for d in first.diffs if not d.rounding_cannot], first.out)
    kernels, machine, torch = (printable(recorded.get(k) or "?", 40) for k in ("cpu_capability", "machine", "torch"))
    made = _("made with {what}").format(what=_("{kernels} kernels, {machine}, torch {torch}").format(
        kernels=kernels if recorded.get("cpu_capability") else _("unrecorded"), machine=machine, torch=torch))
    if (identical := next((r for r in reruns if not r.diffs), None)) is not None:
        return Verdict(ROUNDING, _("{made}; identical with {kernels} kernels here").format(
            made=made, kernels=identical.kernels), [], identical.out)
    closest = min(reruns, key=lambda r: len(r.diffs))  # the kernel path here that differs in fewest quantities
    return Verdict(UNDECIDED, _("{made}, which this machine cannot run: its differences from the kernel paths "
                                "here ({paths}) can be that machine's rounding or an edit; attnlab-reproduce on a "
                                "machine with {kernels} kernels and torch {torch} decides bit for bit").format(
        made=made, paths=", ".join(r.kernels for r in reruns), kernels=kernels, torch=torch),
        closest.diffs, closest.out)


def format_verdict(judged: Verdict) -> str:
    """The verdict's header (``reproduced exactly``, ``not reproduced: N quantities differ``, ...) and a
    table of the differences, those no rounding makes first."""
    n = len(judged.diffs)
    differ = (_("1 quantity differs") if n == 1 else _("{n} quantities differ")).format(n=n)
    header = {EXACT: _("reproduced exactly"),
              ROUNDING: _("reproduced within floating-point rounding: {why}").format(why=judged.why),
              DIFFERENT: _("not reproduced: {differ}").format(differ=differ),
              UNDECIDED: _("cannot be decided here: {why}").format(why=judged.why),
              INTERRUPTED: _("interrupted: {why}").format(why=judged.why or _(STOPPED)),
              CANNOT: _("cannot be reproduced: {why}").format(why=judged.why)}[judged.key]
    if not n:
        return header
    rows = [("quantity", "first differing step", "max abs diff", "note"), *(
        (d.quantity, "-" if d.step is None else str(d.step), "-" if d.max_abs_diff is None else f"{d.max_abs_diff:.6g}",
         d.note) for d in judged.diffs[:MAX_ROWS])]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join([header, *("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)])


def read_verdicts(path: Path) -> dict[str, dict[str, Any]]:
    """The verdict table ``attnlab-reproduce --csv`` wrote, read as data: job -> ``{"verdict", "differs"}``.
    RunFileError (one line) for a file that is not one (no ``job`` or ``verdict`` column)."""
    path = Path(path)
    reader = csv.DictReader(io.StringIO(safe_read.read_text(path, safe_read.METRICS_LIMIT, root=path.parent)))
    if not {"job", "verdict"} <= set(reader.fieldnames or ()):
        raise safe_read.RunFileError(path, "not a verdict table (attnlab-reproduce --csv writes one: columns job, "
                                     "name, verdict, differs, reproduction)")
    return {row["job"]: {"verdict": row["verdict"], "differs": row.get("differs") or None} for row in reader}


def verdict_text(row: dict[str, Any] | None) -> str | None:
    """A verdict row as one cell: the verdict in the reader's language, then what differs."""
    if not row or not row.get("verdict"):
        return None
    key = str(row["verdict"])
    shown = _(key) if key in VERDICTS else printable(key, 60)
    return f"{shown}: {printable(row['differs'], 600)}" if row.get("differs") else shown
