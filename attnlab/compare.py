"""``attnlab-compare PATH... [--sort COLUMN] [--plot FILE]``: one table over saved runs.

A PATH is a run dir (``.hydra/config.yaml`` inside) or a sweep dir (run dirs anywhere below
it). Every row is built from the run's own files only (``summary.json``, ``attention.npz`` or
``walkthrough.npz``, ``.hydra/``), by the same code the sweep-summary callback uses
(:mod:`attnlab.sweep`), so ``summary.csv`` and this table always agree.

Columns (:data:`COLUMNS`, then the exercise observations any row has, :data:`OBSERVATION_COLUMNS`):

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
- ``path``: the run dir (CSV only).

Exit status: 0, or 2 with one line on stderr for a PATH that is not a run/sweep dir, an
unknown ``--sort`` column, or a figure that cannot be written.
"""
from __future__ import annotations

import argparse
import csv
import io
import math
import os
import sys
import unicodedata
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from attnlab import artifacts
from attnlab.errors import AttnlabError, RunDirError
from attnlab.records import head_mean
from attnlab.tokenizer import show

COLUMNS = ["job", "overrides", "status", "final_loss", "steps_run", "steps_to_threshold", "loss_threshold",
           "focus_token", "focus_target", "focus_weight", "snapshot_step", "wall_time_s", "error"]
OBSERVATION_COLUMNS = ["n_tokens", "tokens", "shapes", "max_abs_weight_minus_uniform",
                       "perm_tokens_match", "perm_z_max_abs_diff"]
TRAILING_COLUMNS = ["path"]
TABLE_SKIP = {"overrides", "loss_threshold", "steps_run", "path"}  # CSV only (the job name shows overrides)
SAME_HIDDEN = {"n_tokens", "tokens", "shapes"}  # printed table: shown only when they differ between rows
MAX_JOB = 100  # characters of the job column in the printed table
MAX_CELL = 48  # characters of a cell in the printed table (the CSV keeps everything)
MAX_DEPTH = 6  # folders below a PATH searched for runs (outputs/multirun/NAME/DATE/TIME/JOB is 5)
MAX_HEATMAPS = 8  # --plot: at most this many heatmap panels
HEATMAP_COLS = 4  # --plot: heatmap panels per row


# ----------------------------------------------------------------------------- discovery
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
    from omegaconf import OmegaConf

    try:
        return OmegaConf.load(path)
    except Exception:
        return None


def _job_num(run_dir: Path) -> int | None:
    from omegaconf import OmegaConf

    hydra_cfg = _load_yaml(run_dir / ".hydra" / "hydra.yaml")
    num = OmegaConf.select(hydra_cfg, "hydra.job.num", default=None) if hydra_cfg is not None else None
    if isinstance(num, int):
        return num
    head = run_dir.name.split("_", 1)[0]
    return int(head) if head.isdigit() else None


# ----------------------------------------------------------------------------- one row
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


def _observations(summary: dict[str, Any]) -> dict[str, Any]:
    """Flatten the exercise observations a job wrote (see attnlab.exercises) into columns."""
    out: dict[str, Any] = {}
    if summary.get("n_tokens") is not None:
        out["n_tokens"] = summary["n_tokens"]
    table = summary.get("token_table")
    if table:
        out["tokens"] = " ".join(show(str(t[1])) for t in table)
    shapes = summary.get("shapes")
    if shapes:
        out["shapes"] = " ".join(f"{k}={'x'.join(str(d) for d in v)}" for k, v in shapes.items()
                                 if k in ("X", "Q", "K", "V", "weights", "Z"))
    if summary.get("max_abs_weight_minus_uniform") is not None:
        out["max_abs_weight_minus_uniform"] = summary["max_abs_weight_minus_uniform"]
    perm = summary.get("permutation_check")
    if perm:
        out["perm_tokens_match"] = perm.get("tokens_are_permutation")
        out["perm_z_max_abs_diff"] = perm.get("z_max_abs_diff")
    return out


def job_row(run_dir: Path, job: str | None = None, sweep_end: bool = False) -> dict[str, Any]:
    """One table row for ``run_dir`` (keys: :data:`COLUMNS`, observation columns it has,
    ``path``). Never raises for a broken run: what cannot be read is left empty and said in
    ``error``. ``sweep_end``: the sweep is over, so a ``running`` summary means the job died."""
    from omegaconf import OmegaConf

    run_dir = Path(run_dir)
    cfg = _load_yaml(run_dir / ".hydra" / "config.yaml")
    overrides = _load_yaml(run_dir / ".hydra" / "overrides.yaml")
    row: dict[str, Any] = {c: None for c in COLUMNS}
    row["job"] = job if job is not None else run_dir.name
    row["overrides"] = " ".join(str(o) for o in overrides) if overrides is not None else ""
    threshold = OmegaConf.select(cfg, "train.loss_threshold", default=None) if cfg is not None else None
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
    focus = OmegaConf.select(cfg, "train.focus_token", default=1) if cfg is not None else 1
    encoding = OmegaConf.select(cfg, "tokenizer.encoding", default="gpt2") if cfg is not None else "gpt2"
    try:
        row.update(focus_at_last_snapshot(run_dir, focus, str(encoding)))
    except (AttnlabError, OSError, ValueError, KeyError) as err:
        row["error"] = row["error"] or f"attention unreadable: {err}"
    row.update(_observations(summary))
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


def columns_of(rows: Sequence[dict[str, Any]], table: bool = False) -> list[str]:
    """The columns to show: :data:`COLUMNS`, then each observation column some row has, then
    ``path``; for the printed table (``table=True``) without CSV-only columns."""
    cols = COLUMNS + [c for c in OBSERVATION_COLUMNS if any(r.get(c) is not None for r in rows)] + TRAILING_COLUMNS
    if table:
        cols = [c for c in cols if c not in TABLE_SKIP]
        cols = [c for c in cols if c in ("job", "status") or any(r.get(c) not in (None, "") for r in rows)]
        if len(rows) > 1:  # observations every row shares (same tokens, same shapes) say nothing here
            cols = [c for c in cols if c not in SAME_HIDDEN
                    or len({str(r.get(c)) for r in rows if r.get(c) is not None}) > 1]
    return cols


def sort_rows(rows: list[dict[str, Any]], column: str, reverse: bool = False) -> list[dict[str, Any]]:
    """``rows`` sorted by ``column`` (numbers numerically, text as text, empty cells last).
    Raises KeyError with the allowed columns when ``column`` is not one."""
    allowed = columns_of(rows)
    if column not in allowed:
        raise KeyError(f"--sort {column!r}: unknown column; one of {', '.join(allowed)}")

    def key(row: dict[str, Any]):
        v = row.get(column)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return (2, 0, "")
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return (0, v, "")
        return (1, 0, str(v))

    present = [r for r in rows if key(r)[0] < 2]
    empty = [r for r in rows if key(r)[0] == 2]
    return sorted(present, key=key, reverse=reverse) + empty


# ----------------------------------------------------------------------------- output
def _csv_value(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return v


def csv_text(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as CSV text: header = :func:`columns_of`, floats at full precision (``repr``),
    empty cells for missing values."""
    cols = columns_of(rows)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(cols)
    for r in rows:
        writer.writerow([_csv_value(r.get(c)) for c in cols])
    return buf.getvalue()


def write_csv(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    """Write :func:`csv_text` to ``path`` atomically (UTF-8); returns ``path``."""
    path = Path(path)
    artifacts.atomic_write_text(path, csv_text(rows))
    return path


def read_csv(path: Path) -> list[dict[str, str]]:
    """A ``summary.csv`` back as a list of dicts of strings (empty cells are ``""``)."""
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def _cell(col: str, v: Any) -> str:
    if v is None or v == "":
        return "-"
    if col in ("focus_token", "focus_target"):
        return show(str(v))
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if col == "focus_weight":
            return f"{v:.3f}"
        if col == "wall_time_s":
            return f"{v:.2f}"
        if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e5):
            return f"{v:.2e}"
        return f"{v:.4f}"
    return str(v)


def _width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in ("W", "F") else 0 if unicodedata.combining(ch) else 1
               for ch in text)


def _clip(text: str, n: int = MAX_CELL) -> str:
    text = " ".join(text.split())  # one line
    if _width(text) <= n:
        return text
    out, w = [], 0
    for ch in text:
        cw = _width(ch)
        if w + cw > n - 1:
            break
        out.append(ch)
        w += cw
    return "".join(out) + "…"


HEADERS = {"steps_to_threshold": "steps<thr", "focus_token": "focus", "focus_target": "→ target",
           "focus_weight": "weight", "snapshot_step": "at step", "wall_time_s": "wall_s",
           "max_abs_weight_minus_uniform": "max|w-1/T|", "perm_tokens_match": "perm_tokens",
           "perm_z_max_abs_diff": "perm_max|ΔZ|"}


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as an aligned plain-text table (one line per row; wide cells cut at
    :data:`MAX_CELL` characters with ``…``; Chinese and emoji counted as two columns)."""
    cols = columns_of(rows, table=True)
    head = [HEADERS.get(c, c) for c in cols]
    body = [[_clip(_cell(c, r.get(c)), MAX_JOB if c == "job" else MAX_CELL) for c in cols] for r in rows]
    widths = [max(_width(x) for x in [h] + [b[i] for b in body]) for i, h in enumerate(head)]
    numeric = {c for c in cols if all(isinstance(r.get(c), (int, float)) and not isinstance(r.get(c), bool)
                                      or r.get(c) is None for r in rows)}

    def line(cells: Sequence[str]) -> str:
        parts = []
        for c, x, w in zip(cols, cells, widths):
            pad = " " * (w - _width(x))
            parts.append(pad + x if c in numeric else x + pad)
        return "  ".join(parts).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(head), sep] + [line(b) for b in body])


# ----------------------------------------------------------------------------- figure
def plot(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    """Write one PNG to ``path``: every run's loss curve overlaid on a log y axis (top; zeros
    clipped to the smallest positive loss, non-finite losses left out), and each run's
    last-snapshot attention heatmap side by side (bottom; at most :data:`MAX_HEATMAPS`,
    colour scale [0, 1]). Matplotlib object API (Figure + Agg canvas), written atomically."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from attnlab.plots import draw_heatmap, drawable, label, plot_loss, rc, save_figure

    curves, maps = [], []
    for r in rows:
        run_dir = Path(r["path"])
        if (run_dir / artifacts.METRICS).is_file():
            try:
                steps, losses = artifacts.read_metrics(run_dir)
                if losses.size:
                    curves.append((r["job"], steps, losses))
            except AttnlabError:
                pass
        w, labels, title = _last_weights(run_dir, r)
        if w is not None:
            maps.append((r["job"], w, labels, title))
    shown = maps[:MAX_HEATMAPS]
    n = max(len(shown), 1)
    cols = min(n, HEATMAP_COLS)
    grid_rows = -(-n // cols)
    names = short_names([r["job"] for r in rows])
    curves = [(names[j], s, l) for j, s, l in curves]
    shown = [(names[j], w, lab, t) for j, w, lab, t in shown]
    with matplotlib.rc_context(rc()):
        fig = Figure(figsize=(max(9.0, 3.4 * cols + 0.9), 4.0 + 3.6 * grid_rows), dpi=100, layout="constrained")
        FigureCanvasAgg(fig)
        top, bottom = fig.subfigures(2, 1, height_ratios=[4.0, 3.6 * grid_rows])
        ax = top.subplots()
        for job, steps, losses in curves:
            plot_loss(ax, steps, losses, label=drawable(_clip(job, 90)), lw=1.4)
        if not curves:
            plot_loss(ax, np.zeros(0), np.zeros(0))
        ax.set_title("loss" if curves else "loss (no training runs)")
        if curves:
            ax.legend(fontsize=7, loc="best")
        axes = bottom.subplots(grid_rows, cols, squeeze=False).ravel()
        im = None
        for a, (job, w, labels, title) in zip(axes, shown):
            im = draw_heatmap(a, w, [label(t) for t in labels], drawable(f"{_clip(job, 34)}\n{title}"))
        for a in axes[len(shown):]:
            a.set_axis_off()
        if im is not None:
            bottom.colorbar(im, ax=list(axes), shrink=0.8, label="attention weight")
        more = f" ({len(shown)} of {len(maps)})" if len(maps) > len(shown) else ""
        bottom.suptitle("attention at the last snapshot" + more, fontsize=11)
        path = Path(path)
        if path.parent and not path.parent.exists():
            raise RunDirError(f"--plot {path}: folder {path.parent} does not exist")
        return save_figure(fig, path)


def short_names(jobs: Sequence[str]) -> dict[str, str]:
    """Legend/title names: each job name without the ``,``-separated override items that every
    job in the same folder shares (e.g. ``logging=off``), keeping its folder prefix and job number."""
    def split(job: str) -> tuple[str, list[str]]:
        head, _, tail = job.rpartition("/")
        num, sep, rest = tail.partition("_")
        if not (sep and num.isdigit()):  # not a sweep job's name: keep it whole
            return job, []
        return (f"{head}/" if head else "") + num, rest.split(",")

    parts = {j: split(j) for j in jobs}
    groups: dict[str, list[set[str]]] = {}  # jobs of one sweep (same folder) share their common items
    for j, (prefix, items) in parts.items():
        groups.setdefault(j.rpartition("/")[0], []).append(set(items))
    common = {g: set.intersection(*sets) if len(sets) > 1 else set() for g, sets in groups.items()}
    out = {}
    for j, (prefix, items) in parts.items():
        kept = [i for i in items if i not in common[j.rpartition("/")[0]]]
        out[j] = f"{prefix}_{','.join(kept)}" if kept else prefix
    return out


def _last_weights(run_dir: Path, row: dict[str, Any]):
    """(weights (T, T), token labels, title) at the last snapshot, or (None, None, None)."""
    try:
        last = last_attention(run_dir)
    except (AttnlabError, OSError, ValueError, KeyError):
        last = None
    if last is None:
        return None, None, None
    w, labels, step = last
    return w, labels, ("walkthrough" if step is None else f"step={step}")


# ----------------------------------------------------------------------------- CLI
def main(argv: Sequence[str] | None = None) -> int:
    """``attnlab-compare PATH... [--sort COLUMN] [--reverse] [--csv FILE] [--plot FILE]``."""
    parser = argparse.ArgumentParser(
        prog="attnlab-compare",
        description="One table over saved attnlab runs: run dirs, or sweep dirs (every job below them).")
    parser.add_argument("paths", nargs="+", metavar="PATH", type=Path, help="run dir or sweep dir")
    parser.add_argument("--sort", metavar="COLUMN", help="sort rows by this column (e.g. final_loss)")
    parser.add_argument("--reverse", action="store_true", help="sort descending")
    parser.add_argument("--csv", metavar="FILE", type=Path, help="also write the table as CSV")
    parser.add_argument("--plot", metavar="FILE", type=Path,
                        help="write one figure: loss curves (log y) + last-snapshot heatmaps")
    args = parser.parse_args(argv)
    try:
        rows = collect_rows(args.paths)
        if args.sort:
            rows = sort_rows(rows, args.sort, reverse=args.reverse)
        print(format_table(rows))
        if args.csv:
            write_csv(rows, args.csv)
        if args.plot:
            plot(rows, args.plot)
            print(f"figure: {args.plot}")
    except KeyError as err:
        print(f"attnlab-compare: error: {err.args[0]}", file=sys.stderr)
        return 2
    except (AttnlabError, OSError, ValueError) as err:
        print(f"attnlab-compare: error: {err}", file=sys.stderr)
        return 2
    return 0


def cli() -> None:
    """Console-script entry point."""
    sys.exit(main())


if __name__ == "__main__":
    cli()
