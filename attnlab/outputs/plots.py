"""Matplotlib figures: the tutorial's attention-evolution figure, the loss curve, and the heatmap
they share with TensorBoard's images and the comparison figure (:mod:`attnlab.saved.compare_figure`).

Object API only (``Figure`` + ``FigureCanvasAgg``), never ``pyplot``: no global figure state,
no GUI backend, safe in sweeps and threads. Matplotlib is imported inside the functions, so
``import attnlab.outputs.plots`` costs nothing until a figure is drawn. Fonts: :mod:`attnlab.outputs.fonts`.

A run's figures are laid out once per process, thread and text and redrawn with each run's
data (:class:`EvolutionLayout`, :class:`LossLayout`): the jobs of a sweep skip the layout and
the figure's construction, and the pixels are those of a figure made from scratch.
"""
from __future__ import annotations

import io
import threading
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from attnlab.outputs.fonts import default_title, drawable, label, rc
from attnlab.core.records import RunInfo, RunResult, Sink, Snapshot, head_mean

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

    from attnlab.outputs.render_process import RenderPool, RenderProcess

CMAP = "viridis"
MAX_PANELS = 10  # evolution figure: at most this many snapshots, evenly spaced
MAX_COLS = 5  # ... wrapped into rows of at most this many panels
MAX_HEAD_ROWS = 5  # with several heads: at most this many snapshots, one row of heads each
PANEL_IN = (3.4, 3.6)  # inches per heatmap panel (width, height)
COLORBAR_IN = 0.9  # extra figure width for the shared colour bar
DPI = 100
# ------------------------------------------------------------------------------- heatmaps
MAX_TOKEN_LABELS = 40  # longer texts get position ticks instead of token labels


def cell_color(value: float) -> str:
    """Text colour of a cell value: dark on the bright (high) end of viridis, light elsewhere."""
    return "black" if value > 0.6 else "white"


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
    if t <= 12:  # values in the cells
        size = 8 if t <= 6 else 6 if t <= 9 else 5
        for i in range(t):
            for j in range(t):
                ax.text(j, i, f"{w[i, j]:.2f}", ha="center", va="center", fontsize=size, color=cell_color(w[i, j]),
                        in_layout=False)  # inside the axes: nothing for a layout engine to measure
    return im


def update_heatmap(ax, im, w: np.ndarray, title: str) -> None:
    """Show ``w`` (T, T) in a heatmap drawn by :func:`draw_heatmap` for the same T: the image,
    the cell values and their colours, the title; the rest (ticks, labels, frame) stays."""
    im.set_data(w)
    ax.title.set_text(title)
    for text, value in zip(ax.texts, np.asarray(w).flat):
        text.set_text(f"{value:.2f}")
        text.set_color(cell_color(value))


def pick_snapshots(snapshots: Sequence, max_panels: int = MAX_PANELS) -> list:
    """At most ``max_panels`` of ``snapshots`` (Snapshot objects or their steps), evenly spaced
    by index, always first and last."""
    n = len(snapshots)
    if n <= max_panels:
        return list(snapshots)
    idx = np.unique(np.round(np.linspace(0, n - 1, max_panels)).astype(int))
    return [snapshots[i] for i in idx]


def evolution_figure(snapshots: Sequence[Snapshot], tokens: Sequence[str], title: str | None = None,
                     max_panels: int = MAX_PANELS, total: int | None = None, reuse: bool = False) -> "Figure":
    """The tutorial's section-5 figure as a ``Figure`` (call inside ``rc_context(rc())``).

    One heatmap per snapshot, titled ``step=N\nloss=X.XXX``, one shared colour bar over
    [0, 1]; with more than ``max_panels`` snapshots, ``max_panels`` evenly spaced ones are
    shown (first and last included), wrapped into rows of at most ``MAX_COLS``. With several
    heads (weights ``(H, T, T)``, H > 1) each shown snapshot is a row of its H heads (at most
    ``MAX_HEAD_ROWS`` snapshots). The suptitle says "(k of n snapshots)" when it shows k of the
    run's ``total`` (default: ``len(snapshots)``). Figure size: ``cols * 3.4 + 0.9`` by
    ``rows * 3.6 + 0.5`` inches at 100 dpi.

    ``reuse``: draw into this thread's figure of the same tokens, grid and heads when there is
    one (the jobs of a sweep over one text lay it out once; see :class:`EvolutionLayout`); the
    figure then belongs to the cache: save it, do not keep or change it.
    """
    layout, panels, title = _evolution_layout(snapshots, tokens, title, max_panels, total, reuse)
    return layout.draw(panels, title)


def _evolution_layout(snapshots: Sequence[Snapshot], tokens: Sequence[str], title: str | None, max_panels: int,
                      total: int | None, reuse: bool) -> tuple["EvolutionLayout", list, str]:
    """The layout, the panels ``(weights (T, T), panel title)`` and the suptitle of
    :func:`evolution_figure`."""
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
    title = default_title() if title is None else drawable(title)
    total = len(snapshots) if total is None else total
    if n < total:
        title += f"  ({n} of {total} snapshots)"
    labels = tuple(label(t) for t in tokens)
    titles = tuple(panel_title for _, panel_title in panels)
    layout = _shared_layout(labels, rows, cols, heads, titles, title) if reuse else \
        EvolutionLayout(labels, rows, cols, titles, title)
    return layout, panels, title


class EvolutionLayout:
    """An evolution figure laid out once for one token list and panel grid, redrawn with new
    weights and titles: the figure, its axes, ticks and colour bar are made and placed
    (constrained layout, run once, then fixed) at construction; :meth:`draw` only sets each
    panel's image, cell values and title and the suptitle. Every figure, a fresh one too, is
    drawn this way, so a reused layout gives the pixels a fresh one gives. Saving a reused
    figure skips the layout and the figure's construction: 0.55 -> 0.28 s per
    ``attention_evolution.png`` of a sweep job (2 panels, 6 tokens; docs/benchmarks.md).

    ``labels``: T token labels; ``rows`` x ``cols`` panels, the first ``len(panel_titles)``
    used; ``panel_titles`` and ``title`` (the suptitle) are laid out with the rest, so a later
    :meth:`draw` must bring titles of the same lines.
    """

    def __init__(self, labels: tuple[str, ...], rows: int, cols: int, panel_titles: Sequence[str], title: str):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        t = len(labels)
        self.fig = Figure(figsize=(cols * PANEL_IN[0] + COLORBAR_IN, rows * PANEL_IN[1] + 0.5), dpi=DPI,
                          layout="constrained")
        FigureCanvasAgg(self.fig)
        axes = self.fig.subplots(rows, cols, squeeze=False)
        blank = np.full((t, t), 1.0 / t)
        n_panels = len(panel_titles)
        self.axes = list(axes.flat[:n_panels])
        self.images = [draw_heatmap(ax, blank, labels, panel_title) for ax, panel_title in zip(self.axes, panel_titles)]
        for ax in axes.flat[n_panels:]:
            ax.set_axis_off()
        self.fig.colorbar(self.images[-1], ax=axes, shrink=0.8, label="attention weight")
        self.suptitle = self.fig.suptitle(title, fontsize=13)
        self._background = None  # the pixels of everything that never changes, after the first png()
        self.fig.get_layout_engine().execute(self.fig)  # place everything once, without drawing
        self.fig.set_layout_engine(None)  # None, not "none" (a placeholder engine: savefig then draws twice)

    def draw(self, panels: Sequence[tuple[np.ndarray, str]], title: str) -> "Figure":
        """The figure showing ``panels`` (``(weights (T, T), panel title)``, one per used panel,
        in order) under ``title`` (the one it was laid out with, or one of the same height)."""
        for ax, im, (weights, panel_title) in zip(self.axes, self.images, panels):
            update_heatmap(ax, im, weights, panel_title)
        self.suptitle.set_text(title)
        return self.fig

    def _changing(self) -> list:
        """What :meth:`draw` changes, in the order a full draw paints it: per panel the image,
        the frame over it, the cell values and the title; then the suptitle."""
        per_panel = [[im, *ax.spines.values(), *ax.texts, ax.title] for ax, im in zip(self.axes, self.images)]
        return [artist for artists in per_panel for artist in artists] + [self.suptitle]

    def png(self, panels: Sequence[tuple[np.ndarray, str]], title: str) -> bytes:
        """:meth:`draw`, saved as PNG: the same bytes as ``savefig(format="png")``, drawn
        faster: the unchanging parts (axes, tick labels, colour bar: ~40 % of the drawing) are
        drawn once per layout and copied, then only what :meth:`draw` changed is drawn over
        them (as :class:`attnlab.outputs.tensorboard.HeatmapRenderer` does). Nothing is drawn over
        the changing parts in a full draw (ticks point outwards, the title sits above the
        axes), so the pixels are a full draw's (tests/test_plots.py compares them)."""
        import matplotlib.image

        canvas = self.fig.canvas
        changing = self._changing()
        if self._background is None:
            for artist in changing:
                artist.set_visible(False)
            canvas.draw()
            self._background = canvas.copy_from_bbox(self.fig.bbox)
            for artist in changing:
                artist.set_visible(True)
        self.draw(panels, title)
        canvas.restore_region(self._background)
        renderer = canvas.get_renderer()
        for artist in changing:
            artist.draw(renderer)
        buf = io.BytesIO()  # what savefig's print_png does with the drawn canvas
        matplotlib.image.imsave(buf, canvas.buffer_rgba(), format="png", origin="upper", dpi=self.fig.dpi)
        return buf.getvalue()


_layouts: "OrderedDict[tuple, Any]" = OrderedDict()  # EvolutionLayout and LossLayout objects
MAX_LAYOUTS = 4  # figures kept per process (the most recently used)


def _cached_layout(key: tuple, make: Callable[[], Any]) -> Any:
    """The layout for ``key`` in this thread with these fonts (matplotlib figures are not
    thread-safe, and a text keeps the font it was made with), made by ``make`` on first use;
    the :data:`MAX_LAYOUTS` most recently used are kept."""
    key = (*key, tuple(rc()["font.family"]), threading.get_ident())
    layout = _layouts.pop(key, None) or make()
    _layouts[key] = layout
    while len(_layouts) > MAX_LAYOUTS:
        _layouts.popitem(last=False)
    return layout


def _shared_layout(labels: tuple[str, ...], rows: int, cols: int, heads: int, panel_titles: tuple[str, ...],
                   title: str) -> EvolutionLayout:
    """The :class:`EvolutionLayout` for the token labels, grid, heads and suptitle (panel titles
    of one grid and head count have the same lines), see :func:`_cached_layout`."""
    return _cached_layout(("evolution", labels, rows, cols, heads, len(panel_titles), title),
                          lambda: EvolutionLayout(labels, rows, cols, panel_titles, title))


def figure_bytes(fig: "Figure", fmt: str = "png") -> bytes:
    """``fig`` rendered as a file of format ``fmt`` (``png``, ``pdf``, ``svg``), in memory."""
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt)
    return buf.getvalue()


def write_figure_file(data: bytes, path: Path) -> Path:
    """Write a rendered figure to ``path`` atomically (artifacts.atomic_write_bytes: a reader
    never sees half a file; the run dir's disk reserve applies); creates the folder. Raises
    :class:`~attnlab.core.errors.WriteError` naming the file when it cannot be written."""
    from attnlab.outputs.artifacts import atomic_write_bytes

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, data)
    return path


def _format_of(path: Path) -> str:
    """The file format ``path``'s suffix names (``png`` when it has none)."""
    return Path(path).suffix.lstrip(".").lower() or "png"


def save_figure(fig: "Figure", path: Path) -> Path:
    """Render ``fig`` in the format its suffix names (PNG when none: ``.pdf``, ``.svg`` work)
    and write it to ``path`` (:func:`write_figure_file`)."""
    return write_figure_file(figure_bytes(fig, _format_of(path)), path)


def evolution_png(snapshots: Sequence[Snapshot], tokens: Sequence[str], title: str | None = None,
                  max_panels: int = MAX_PANELS, total: int | None = None, fmt: str = "png") -> bytes:
    """The evolution figure (see :func:`evolution_figure`) as the bytes of a ``fmt`` file;
    what :func:`attention_evolution` writes (and what attnlab.outputs.render_process's child returns)."""
    import matplotlib

    with matplotlib.rc_context(rc()):
        if fmt == "png":  # the unchanging parts copied, not drawn again (EvolutionLayout.png)
            return EvolutionLayout.png(*_evolution_layout(snapshots, tokens, title, max_panels, total, reuse=True))
        return figure_bytes(evolution_figure(snapshots, tokens, title, max_panels, total, reuse=True), fmt)


def attention_evolution(snapshots: Sequence[Snapshot], tokens: Sequence[str], path: Path, title: str | None = None,
                        max_panels: int = MAX_PANELS, total: int | None = None) -> Path:
    """Write the evolution figure (see :func:`evolution_figure`) to ``path`` as PNG.

    ``snapshots``: :class:`~attnlab.core.records.Snapshot` list in step order, weights ``(H, T, T)``
    or ``(T, T)``; ``tokens``: T labels. ``title`` None = Chinese/English default; ``total``
    the snapshots the run took (more than ``snapshots`` when only some were kept).
    """
    return write_figure_file(evolution_png(snapshots, tokens, title, max_panels, total, _format_of(path)), path)


MSE_LABEL = "loss (MSE)"  # the tutorial's objective (attnlab.core.config.loss_axis_label names the others)


def loss_png(losses: np.ndarray, title: str = "loss", fmt: str = "png", ylabel: str = MSE_LABEL) -> bytes | None:
    """``loss.png``'s bytes (see :func:`loss_curve`); None when there is no finite loss."""
    import matplotlib

    y = np.asarray(losses, dtype=np.float64)
    if not np.isfinite(y).any():
        return None
    with matplotlib.rc_context(rc()):
        return figure_bytes(_loss_layout(ylabel).draw(y, drawable(title)), fmt)


def _loss_layout(ylabel: str) -> "LossLayout":
    return _cached_layout(("loss", ylabel), lambda: LossLayout(ylabel))


def loss_curve(losses: np.ndarray, path: Path, title: str = "loss", ylabel: str = MSE_LABEL) -> Path | None:
    """Write ``loss.png``: loss ``(steps,)`` against step on a log y axis labelled ``ylabel``
    (``loss (MSE)``, the tutorial's objective; :func:`attnlab.core.config.loss_axis_label`).

    Zeros are clipped to the smallest positive loss (1e-12 if there is none) so the log axis
    stays finite; non-finite losses (a diverged run) are left out. Returns None (no file)
    when there is no finite loss. The figure is made once per thread and redrawn with each
    run's curve (:class:`LossLayout`, :func:`_cached_layout`).
    """
    data = loss_png(losses, title, _format_of(path), ylabel)
    return None if data is None else write_figure_file(data, path)


class LossLayout:
    """``loss.png``'s figure (6.4 x 4.0 in, fixed margins: one axes needs no layout engine,
    which was ~60 % of its time), made once and redrawn with new data: the curve, its limits
    (autoscaled again) and the title; the ticks follow the limits at each draw. Every figure,
    the first too, is drawn this way, so a reused one gives the pixels a fresh one gives."""

    def __init__(self, ylabel: str = MSE_LABEL):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        self.fig = Figure(figsize=(6.4, 4.0), dpi=DPI)
        FigureCanvasAgg(self.fig)
        self.fig.subplots_adjust(left=LOSS_LEFT, right=0.97, bottom=0.12, top=0.91)
        self.ax = self.fig.add_subplot()
        self.ax.set_yscale("log")
        self.ax.set_xlabel("step")
        self.ax.set_ylabel(ylabel)
        self.ax.grid(True, which="both", alpha=0.3)
        [self.line] = self.ax.plot([], [], lw=1.5)

    def draw(self, losses: np.ndarray, title: str) -> "Figure":
        """The figure showing ``losses`` ``(n,)`` (at least one finite) against step 0..n-1."""
        steps, y = finite_losses(np.arange(losses.size), losses)
        self.line.set_data(steps, y)
        self.ax.relim()
        self.ax.autoscale_view()
        self.ax.set_title(title)
        fit_left_margin(self.fig, self.ax)
        return self.fig


LOSS_LEFT = 0.13  # loss.png's left margin (fraction of the width), widened when the y axis needs more


def fit_left_margin(fig: "Figure", ax, left: float = LOSS_LEFT, pad_px: float = 4.0) -> None:
    """Set ``fig``'s left margin to ``left``, widened just enough that ``ax``'s y tick labels
    and y label start ``pad_px`` pixels inside the figure (measured for the current limits
    and ticks, without drawing): fixed margins cut the label of an axis with wide tick labels."""
    fig.subplots_adjust(left=left)
    box = ax.yaxis.get_tightbbox(fig.canvas.get_renderer())
    if box is not None and box.x0 < pad_px:
        fig.subplots_adjust(left=left + (pad_px - box.x0) / fig.bbox.width)


def finite_losses(steps: np.ndarray, losses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The finite points of a loss curve, zeros clipped to the smallest positive loss (1e-12
    if none) so a log axis stays finite: ``(steps (m,), losses (m,))``, m <= n."""
    y = np.asarray(losses, dtype=np.float64)
    ok = np.isfinite(y)
    positive = y[ok & (y > 0)]
    return np.asarray(steps)[ok], np.clip(y[ok], positive.min() if positive.size else 1e-12, None)


def plot_loss(ax, steps: np.ndarray, losses: np.ndarray, ylabel: str = MSE_LABEL, **line_kw) -> bool:
    """Draw one loss curve (``steps`` (n,), ``losses`` (n,)) on ``ax`` with a log y axis, labels
    (``ylabel`` on the y axis) and grid. Zeros are clipped to the smallest positive loss (1e-12 if none) so the log axis
    stays finite; non-finite losses (a diverged run) are left out. False when nothing was drawn."""
    x, y = finite_losses(steps, losses)
    if x.size:
        ax.plot(x, y, **{"lw": 1.5, **line_kw})
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    return bool(x.size)


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

    def __init__(self, run_dir: Path, render: "RenderPool | RenderProcess | None" = None):
        self.run_dir = Path(run_dir)
        self.render = render  # draw in this process's render child (attnlab.outputs.render_process), else here
        self.tokens: list[str] = []
        self.snapshots: list[Snapshot] = []
        self._losses: list[np.ndarray] = []
        self._shown: set[int] | None = None  # steps the figure will show, known at on_start
        self._latest: Snapshot | None = None
        self._received = 0  # snapshots the run took
        self._ylabel = MSE_LABEL  # loss.png's y axis: the run's objective

    def on_start(self, info: RunInfo) -> None:
        from attnlab.core.config import loss_axis_label, objective_of

        self.tokens = list(info.tokens)
        self._shown = set(pick_snapshots(list(info.snapshot_steps)))
        self._ylabel = loss_axis_label([objective_of(info.config)])

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
        from attnlab.core.interrupts import pause_point
        from attnlab.outputs.render_process import request

        pause_point("drawing")  # a test hook: the run's records are written, its figures not yet
        losses = self.losses if self._losses else np.asarray(result.losses, dtype=np.float64)
        snapshots, evolution, loss = self._to_draw(), None, None
        if snapshots and self.tokens:
            # only the drawn snapshots were kept, so the figure is told how many the run took; both
            # asked at once (drawn in the render child when there is one, else here at result()),
            # written here (this process holds the run dir)
            evolution = request(self.render, "evolution", snapshots, self.tokens, None, MAX_PANELS, self._received)
        if losses.size:
            loss = request(self.render, "loss", losses, self._ylabel)
        if evolution is not None:
            write_figure_file(evolution.result(), self.run_dir / self.EVOLUTION)
        if loss is not None and (data := loss.result()) is not None:
            write_figure_file(data, self.run_dir / self.LOSS)
