"""Matplotlib figures: the tutorial's attention-evolution figure, the loss curve, the
comparison figure of ``attnlab-compare --plot``, and the heatmap they (and TensorBoard's images)
share.

Object API only (``Figure`` + ``FigureCanvasAgg``), never ``pyplot``: no global figure state,
no GUI backend, safe in sweeps and threads. Matplotlib is imported inside the functions, so
``import attnlab.plots`` costs nothing until a figure is drawn. Fonts: :mod:`attnlab.fonts`.
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from attnlab.fonts import default_title, drawable, label, rc
from attnlab.records import RunInfo, RunResult, Sink, Snapshot, head_mean

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

CMAP = "viridis"
MAX_PANELS = 10  # evolution figure: at most this many snapshots, evenly spaced
MAX_COLS = 5  # ... wrapped into rows of at most this many panels
MAX_HEAD_ROWS = 5  # with several heads: at most this many snapshots, one row of heads each
PANEL_IN = (3.4, 3.6)  # inches per heatmap panel (width, height)
COLORBAR_IN = 0.9  # extra figure width for the shared colour bar
DPI = 100
MAX_HEATMAPS = 8  # comparison figure: at most this many heatmap panels
HEATMAP_COLS = 4  # ... per row
# ------------------------------------------------------------------------------- heatmaps
MAX_TOKEN_LABELS = 40  # longer texts get position ticks instead of token labels


def draw_heatmap(ax, w: np.ndarray, labels: Sequence[str], title: str):
    """One heatmap of ``w`` (T, T) on ``ax`` in the tutorial's style (viridis, [0, 1], token
    labels up to 40 tokens, cell values up to 12); returns the image for a colour bar."""
    t = w.shape[0]
    im = ax.imshow(w, cmap=CMAP, vmin=0.0, vmax=1.0)
    # y given: the title sits above the axes without matplotlib measuring every tick label at
    # each draw to place it (nothing is drawn above a heatmap, so the place is the same)
    ax.set_title(title, fontsize=10, y=1.0)
    if t <= MAX_TOKEN_LABELS:
        ax.set_xticks(range(t), labels, rotation=45, ha="right", rotation_mode="anchor", fontsize=8)
        ax.set_yticks(range(t), labels, fontsize=8)
    else:  # long text: token labels would overlap; show positions
        ax.set_xlabel("key position", fontsize=8)
        ax.set_ylabel("query position", fontsize=8)
    if t <= 12:  # values in the cells, dark text on the bright (high) end of viridis
        size = 8 if t <= 6 else 6 if t <= 9 else 5
        for i in range(t):
            for j in range(t):
                ax.text(j, i, f"{w[i, j]:.2f}", ha="center", va="center", fontsize=size,
                        color="black" if w[i, j] > 0.6 else "white",
                        in_layout=False)  # inside the axes: nothing for a layout engine to measure
    return im


def pick_snapshots(snapshots: Sequence, max_panels: int = MAX_PANELS) -> list:
    """At most ``max_panels`` of ``snapshots`` (Snapshot objects or their steps), evenly spaced
    by index, always first and last."""
    n = len(snapshots)
    if n <= max_panels:
        return list(snapshots)
    idx = np.unique(np.round(np.linspace(0, n - 1, max_panels)).astype(int))
    return [snapshots[i] for i in idx]


def evolution_figure(snapshots: Sequence[Snapshot], tokens: Sequence[str], title: str | None = None,
                     max_panels: int = MAX_PANELS, total: int | None = None) -> "Figure":
    """The tutorial's section-5 figure as a ``Figure`` (call inside ``rc_context(rc())``).

    One heatmap per snapshot, titled ``step=N\nloss=X.XXX``, one shared colour bar over
    [0, 1]; with more than ``max_panels`` snapshots, ``max_panels`` evenly spaced ones are
    shown (first and last included), wrapped into rows of at most ``MAX_COLS``. With several
    heads (weights ``(H, T, T)``, H > 1) each shown snapshot is a row of its H heads (at most
    ``MAX_HEAD_ROWS`` snapshots). The suptitle says "(k of n snapshots)" when it shows k of the
    run's ``total`` (default: ``len(snapshots)``). Figure size: ``cols * 3.4 + 0.9`` by
    ``rows * 3.6 + 0.5`` inches at 100 dpi.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    heads = np.asarray(snapshots[0].weights).shape[0] if np.ndim(snapshots[0].weights) == 3 else 1
    shown = pick_snapshots(snapshots, min(max_panels, MAX_HEAD_ROWS) if heads > 1 else max_panels)
    n = len(shown)
    if heads > 1:
        cols, rows = heads, n
        panels = [(snap.weights[h], f"step={snap.step}  head {h}" + (f"\nloss={snap.loss:.3f}" if h == 0 else "\n"))
                  for snap in shown for h in range(heads)]
    else:
        cols = min(n, MAX_COLS)
        rows = -(-n // cols)
        panels = [(head_mean(snap.weights), f"step={snap.step}\nloss={snap.loss:.3f}") for snap in shown]
    fig = Figure(figsize=(cols * PANEL_IN[0] + COLORBAR_IN, rows * PANEL_IN[1] + 0.5), dpi=DPI,
                 layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False)
    labels = [label(t) for t in tokens]
    im = None
    for ax, (weights, panel_title) in zip(axes.flat, panels):
        im = draw_heatmap(ax, weights, labels, panel_title)
    for ax in axes.flat[len(panels):]:
        ax.set_axis_off()
    fig.colorbar(im, ax=axes, shrink=0.8, label="attention weight")
    title = default_title() if title is None else drawable(title)
    total = len(snapshots) if total is None else total
    if n < total:
        title += f"  ({n} of {total} snapshots)"
    fig.suptitle(title, fontsize=13)
    return fig


def save_figure(fig: "Figure", path: Path) -> Path:
    """Render ``fig`` in the format its suffix names (PNG when none: ``.pdf``, ``.svg`` work)
    and write it to ``path`` atomically (artifacts.atomic_write_bytes), so a reader never sees
    half a file; creates the folder."""
    from attnlab.artifacts import atomic_write_bytes

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    fig.savefig(buf, format=path.suffix.lstrip(".").lower() or "png")
    atomic_write_bytes(path, buf.getvalue())
    return path


def attention_evolution(snapshots: Sequence[Snapshot], tokens: Sequence[str], path: Path, title: str | None = None,
                        max_panels: int = MAX_PANELS, total: int | None = None) -> Path:
    """Write the evolution figure (see :func:`evolution_figure`) to ``path`` as PNG.

    ``snapshots``: :class:`~attnlab.records.Snapshot` list in step order, weights ``(H, T, T)``
    or ``(T, T)``; ``tokens``: T labels. ``title`` None = Chinese/English default; ``total``
    the snapshots the run took (more than ``snapshots`` when only some were kept).
    """
    import matplotlib

    with matplotlib.rc_context(rc()):
        return save_figure(evolution_figure(snapshots, tokens, title, max_panels, total), path)


def loss_curve(losses: np.ndarray, path: Path, title: str = "loss") -> Path | None:
    """Write ``loss.png``: loss ``(steps,)`` against step on a log y axis.

    Zeros are clipped to the smallest positive loss (1e-12 if there is none) so the log axis
    stays finite; non-finite losses (a diverged run) are left out. Returns None (no file)
    when there is no finite loss.
    """
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    y = np.asarray(losses, dtype=np.float64)
    if not np.isfinite(y).any():
        return None
    with matplotlib.rc_context(rc()):
        # fixed margins: one axes needs no layout engine (constrained layout was ~60% of the time)
        fig = Figure(figsize=(6.4, 4.0), dpi=DPI)
        FigureCanvasAgg(fig)
        fig.subplots_adjust(left=0.13, right=0.97, bottom=0.12, top=0.91)
        ax = fig.add_subplot()
        plot_loss(ax, np.arange(y.size), y)
        ax.set_title(drawable(title))
        return save_figure(fig, path)


def plot_loss(ax, steps: np.ndarray, losses: np.ndarray, **line_kw) -> bool:
    """Draw one loss curve (``steps`` (n,), ``losses`` (n,)) on ``ax`` with a log y axis, labels
    and grid. Zeros are clipped to the smallest positive loss (1e-12 if none) so the log axis
    stays finite; non-finite losses (a diverged run) are left out. False when nothing was drawn."""
    y = np.asarray(losses, dtype=np.float64)
    ok = np.isfinite(y)
    if ok.any():
        positive = y[ok & (y > 0)]
        ax.plot(np.asarray(steps)[ok], np.clip(y[ok], positive.min() if positive.size else 1e-12, None),
                **{"lw": 1.5, **line_kw})
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (MSE)")
    ax.grid(True, which="both", alpha=0.3)
    return bool(ok.any())


# ----------------------------------------------------------------------- comparison
def comparison_figure(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    """Write one PNG to ``path``: every run's loss curve overlaid on a log y axis (top; zeros
    clipped to the smallest positive loss, non-finite losses left out), and each run's
    last-snapshot attention heatmap side by side (bottom; at most :data:`MAX_HEATMAPS`,
    colour scale [0, 1]). Matplotlib object API (Figure + Agg canvas), written atomically.

    Legend entries and heatmap titles name each run by its job number (or folder) and the
    values of the swept keys, the overrides that differ between the runs, with short key names
    (``3  lr=0.05 steps=120``; :mod:`attnlab.swept`), wrapped to the panel's width. The layout
    (constrained) keeps every text inside the figure and clear of the others; the figure is
    ``max(9, 3.4 * cols + 0.9)`` inches wide and ``4.3 + rows * (3.5 + 0.17 * title lines)``
    high at 100 dpi (cols ≤ 4 heatmaps per row).
    """
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from attnlab import artifacts
    from attnlab.errors import AttnlabError, RunDirError
    from attnlab.swept import run_labels, wrap

    TITLE_CHARS, MAX_TITLE_LINES = 34, 3  # heatmap titles: name and swept values wrapped at 34 characters
    names = short_names([r["job"] for r in rows])
    labels_of = {id(r): lab for r, lab in zip(rows, run_labels(rows, names))}

    def legend_name(r) -> str:
        name, values = labels_of[id(r)]
        return f"{name}: {values}" if values else name

    def panel_title(r, what: str) -> str:  # "3: lr=0.05 steps=120" wrapped to the panel, then "step=29"
        lines = wrap(legend_name(r), TITLE_CHARS, MAX_TITLE_LINES, measure=lambda s: len(drawable(s)))
        return "\n".join(drawable(line) for line in [*lines, what])

    curves, maps = [], []
    for r in rows:
        run_dir = Path(r["path"])
        if (run_dir / artifacts.METRICS).is_file():
            try:
                steps, losses = artifacts.read_metrics(run_dir)
                if losses.size:
                    curves.append((legend_name(r), steps, losses))
            except AttnlabError:
                pass
        w, labels, what = _last_weights(run_dir, r)
        if w is not None:
            maps.append((panel_title(r, what), w, labels))
    shown = maps[:MAX_HEATMAPS]
    n = max(len(shown), 1)
    cols = min(n, HEATMAP_COLS)
    grid_rows = -(-n // cols)
    title_lines = max([t.count("\n") + 1 for t, _, _ in shown], default=2)
    row_in = 3.5 + 0.17 * title_lines
    more = f" ({len(shown)} of {len(maps)})" if len(maps) > len(shown) else ""
    with matplotlib.rc_context(rc()):
        fig = Figure(figsize=(max(9.0, 3.4 * cols + 0.9), 4.6 + row_in * grid_rows), dpi=DPI, layout="constrained")
        FigureCanvasAgg(fig)
        # one grid: the loss axes, a heading row (an empty axes whose title the layout makes room
        # for, so no panel title runs into it), then the heatmaps
        grid = fig.add_gridspec(2 + grid_rows, cols, height_ratios=[4.3, 0.01] + [row_in] * grid_rows)
        ax = fig.add_subplot(grid[0, :])
        for name, steps, losses in curves:
            plot_loss(ax, steps, losses, label=drawable(name), lw=1.4)
        if not curves:
            plot_loss(ax, np.zeros(0), np.zeros(0))
        ax.set_title("loss" if curves else "loss (no training runs)")
        if curves:
            ax.legend(fontsize=7, loc="best")
        heading = fig.add_subplot(grid[1, :])
        heading.set_axis_off()
        heading.set_title("attention at the last snapshot" + more, fontsize=11)
        axes = [fig.add_subplot(grid[2 + i // cols, i % cols]) for i in range(grid_rows * cols)]
        im = None
        for a, (title, w, labels) in zip(axes, shown):
            im = draw_heatmap(a, w, [label(t) for t in labels], title)  # title: made drawable line by line
            if w.shape[0] > 12:  # smaller token labels, so long texts' ticks do not run into each other
                a.tick_params(labelsize=6 if w.shape[0] <= 24 else 5)
        for a in axes[len(shown):]:
            a.set_axis_off()
        if im is not None:
            fig.colorbar(im, ax=axes, shrink=0.8, label="attention weight")
        path = Path(path)
        if path.parent and not path.parent.exists():
            raise RunDirError(f"--plot {path}: folder {path.parent} does not exist")
        return save_figure(fig, path)


def short_names(jobs: Sequence[str]) -> dict[str, str]:
    """Legend/title names: a sweep job (``[folder/]N_overrides``) by its folder prefix and job
    number (``N``, ``sweep/N``; the swept values are added by :func:`attnlab.swept.run_labels`),
    any other run by its whole name (``2026-11-29/12-00-00.123456``)."""
    out = {}
    for job in jobs:
        head, _, tail = job.rpartition("/")
        num, sep, _ = tail.partition("_")
        out[job] = (f"{head}/" if head else "") + num if sep and num.isdigit() else job
    return out


def _last_weights(run_dir: Path, row: dict[str, Any]):
    """(weights (T, T), token labels, title) at the last snapshot, or (None, None, None)."""
    from attnlab.errors import AttnlabError
    from attnlab.runs import last_attention

    try:
        last = last_attention(run_dir)
    except (AttnlabError, OSError, ValueError, KeyError):
        last = None
    if last is None:
        return None, None, None
    w, labels, step = last
    return w, labels, ("walkthrough" if step is None else f"step={step}")


# ----------------------------------------------------------------------------------- sink
class FigureSink(Sink):
    """Writes ``attention_evolution.png`` and ``loss.png`` into ``run_dir`` at the end of a
    run (whatever its status); each is skipped silently when there is nothing to draw.

    Memory stays flat however many snapshots a run takes: only the snapshots the figure will
    show (chosen from ``RunInfo.snapshot_steps`` at the start, see :func:`pick_snapshots`) and
    the latest one (for a run that stops early) are kept; the title says "(k of n snapshots)"
    when the figure shows k of the n snapshots the run took.
    """

    EVOLUTION = "attention_evolution.png"
    LOSS = "loss.png"

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.tokens: list[str] = []
        self.snapshots: list[Snapshot] = []
        self._losses: list[np.ndarray] = []
        self._shown: set[int] | None = None  # steps the figure will show, known at on_start
        self._latest: Snapshot | None = None
        self._received = 0  # snapshots the run took

    def on_start(self, info: RunInfo) -> None:
        self.tokens = list(info.tokens)
        self._shown = set(pick_snapshots(list(info.snapshot_steps)))

    def on_losses(self, steps: np.ndarray, losses: np.ndarray) -> None:
        self._losses.append(np.asarray(losses, dtype=np.float64))

    def on_snapshot(self, snapshot: Snapshot) -> None:
        self._received += 1
        if self._shown is None or snapshot.step in self._shown:
            self.snapshots.append(snapshot)
        else:
            self._latest = snapshot

    def _to_draw(self) -> list[Snapshot]:
        """The kept snapshots plus the latest one when it came after them (an early stop)."""
        latest = self._latest
        if latest is not None and (not self.snapshots or latest.step > self.snapshots[-1].step):
            return pick_snapshots(self.snapshots + [latest])
        return self.snapshots

    @property
    def losses(self) -> np.ndarray:
        """Every loss received so far, ``(n,)`` float64."""
        return np.concatenate(self._losses) if self._losses else np.zeros(0)

    def on_end(self, result: RunResult) -> None:
        losses = self.losses if self._losses else np.asarray(result.losses, dtype=np.float64)
        snapshots = self._to_draw()
        if snapshots and self.tokens:
            # only the drawn snapshots were kept, so the figure is told how many the run took
            attention_evolution(snapshots, self.tokens, self.run_dir / self.EVOLUTION, total=self._received)
        if losses.size:
            loss_curve(losses, self.run_dir / self.LOSS)
