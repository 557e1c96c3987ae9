"""Matplotlib figures (tutorial §5): the attention-evolution figure, the loss curve, and the heatmap
they share with TensorBoard and :mod:`attnlab.saved.compare_figure`. ``Figure`` + ``FigureCanvasAgg``
(no pyplot, no GUI); matplotlib is imported only when a figure is drawn."""
from __future__ import annotations

import dataclasses
import io
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from attnlab.core import interrupts
from attnlab.core.config import loss_axis_label, select
from attnlab.core.i18n import _
from attnlab.core.records import RunInfo, RunResult, Sink, Snapshot, head_mean
from attnlab.outputs.artifacts import atomic_write
from attnlab.outputs.drawing import Drawing
from attnlab.outputs.fonts import drawable, label, style

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

MAX_PANELS = 10  # evolution figure: at most this many snapshots, evenly spaced
MAX_COLS = 5  # ... wrapped into rows of at most this many panels
MAX_HEAD_ROWS = 5  # with several heads: at most this many snapshots, one row of heads each
PANEL_IN = (3.4, 3.6)  # inches per heatmap panel (width, height), up to 12 tokens
TICK_IN = 0.2  # inches per token of a larger panel: labels of 13-40 tokens (8 pt, rotated 45°) never overlap
MAX_FIGURE_IN = 24  # panels per row shrink to keep a figure of large panels at most this wide
COLORBAR_IN = 0.9  # extra figure width for the shared colour bar
DPI = 100
MAX_TOKEN_LABELS = 40  # longer texts get position ticks instead of token labels
MAX_CELL_VALUES = 12  # longer texts get no values in the cells
MSE_LABEL = "loss (MSE)"  # the tutorial's objective (attnlab.core.config.loss_axis_label names the others)


def warm_up() -> None:
    """matplotlib loaded and a first heatmap drawn (fonts, glyph caches): a figure worker's start."""
    heatmap_pixels(["a", "b"], np.eye(2))


def new_figure(width_in: float, height_in: float) -> "Figure":
    """An Agg figure at :data:`DPI`, constrained layout (call inside :func:`style`)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def draw_heatmap(ax, w: np.ndarray, tokens: Sequence[str], title: str):
    """One heatmap of ``w`` (T, T) on ``ax`` in the tutorial's style: viridis over [0, 1], the tokens' :func:`label`
    ticks up to 40 tokens (positions beyond), cell values up to 12. Returns the image (for a colour bar)."""
    t = w.shape[0]
    labels = [label(tok) for tok in tokens]
    im = ax.imshow(w, cmap="viridis", vmin=0.0, vmax=1.0)
    ax.set_title(title, fontsize=10)
    if t <= MAX_TOKEN_LABELS:
        ax.set_xticks(range(t), labels, rotation=45, ha="right", rotation_mode="anchor", fontsize=8)
        ax.set_yticks(range(t), labels, fontsize=8)
    else:
        ax.set_xlabel(_("key position"), fontsize=8)
        ax.set_ylabel(_("query position"), fontsize=8)
    if t <= MAX_CELL_VALUES:
        size = 8 if t <= 6 else 6 if t <= 9 else 5
        for i, j in np.ndindex(t, t):  # dark text on the bright (high) end of viridis
            ax.text(j, i, f"{w[i, j]:.2f}", ha="center", va="center", fontsize=size,
                    color="black" if w[i, j] > 0.6 else "white")
    return im


def heatmap_pixels(tokens: Sequence[str], weights: np.ndarray, title: str = "") -> np.ndarray:
    """TensorBoard's heatmap of ``weights`` ((T, T) or (H, T, T), heads averaged): ``(400, 460, 3)`` uint8 RGB,
    colour scale fixed to [0, 1] so steps compare."""
    with style():
        fig = new_figure(4.6, 4.0)
        ax = fig.add_subplot()
        im = draw_heatmap(ax, head_mean(weights), tokens, drawable(title))
        fig.colorbar(im, ax=ax, shrink=0.85)
        fig.canvas.draw()
        return np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()


def pick_snapshots(snapshots: Sequence, max_panels: int = MAX_PANELS) -> list:
    """At most ``max_panels`` of ``snapshots`` (Snapshot objects or steps), evenly spaced, first and last in."""
    n = len(snapshots)
    if n <= max_panels:
        return list(snapshots)
    return [snapshots[i] for i in np.unique(np.round(np.linspace(0, n - 1, max_panels)).astype(int))]


def evolution_figure(snapshots: Sequence[Snapshot], tokens: Sequence[str], total: int | None = None) -> "Figure":
    """Tutorial §5's figure (call inside :func:`style`): a heatmap per snapshot (weights (H, T, T)), in rows
    of :data:`MAX_COLS`, or with H > 1 a row of heads per snapshot; ``(k of n snapshots)`` in the suptitle
    when it shows k of the run's ``total`` (default ``len(snapshots)``)."""
    heads = len(snapshots[0].weights)  # weights (H, T, T)
    shown = pick_snapshots(snapshots, MAX_HEAD_ROWS if heads > 1 else MAX_PANELS)
    grow = TICK_IN * max(0, min(len(tokens), MAX_TOKEN_LABELS) - MAX_CELL_VALUES)  # inches a panel grows by
    panel_w, panel_h = PANEL_IN[0] + grow, PANEL_IN[1] + grow
    if heads > 1:  # a row of heads per snapshot
        cols, rows = heads, len(shown)
        panels = [(np.asarray(s.weights[h], dtype=np.float64),
                   f"step={s.step}  " + _("head {h}").format(h=h) + (f"\nloss={s.loss:.3f}" if h == 0 else "\n"))
                  for s in shown for h in range(heads)]
    else:
        cols = min(len(shown), MAX_COLS, max(1, int(MAX_FIGURE_IN // panel_w)))
        rows = -(-len(shown) // cols)
        panels = [(head_mean(s.weights), f"step={s.step}\nloss={s.loss:.3f}") for s in shown]
    suptitle = _("Attention weights during training")
    total = len(snapshots) if total is None else total
    if len(shown) < total:
        suptitle += _("  ({k} of {n} snapshots)").format(k=len(shown), n=total)

    fig = new_figure(cols * panel_w + COLORBAR_IN, rows * panel_h + 0.5)
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax, (w, panel_title) in zip(axes.flat, panels):
        im = draw_heatmap(ax, w, tokens, panel_title)
    for ax in axes.flat[len(panels):]:
        ax.set_axis_off()
    fig.colorbar(im, ax=axes, shrink=0.8, label=_("attention weight"))
    fig.suptitle(suptitle, fontsize=13)
    return fig


def plot_loss(ax, steps: np.ndarray, losses: np.ndarray, ylabel: str = MSE_LABEL, **line_kw) -> bool:
    """One loss curve (``steps`` (n,), ``losses`` (n,)) on a log y axis: non-finite losses left out, zeros
    clipped to the smallest positive loss (1e-12 if none). False when there was nothing to draw."""
    y = np.asarray(losses, dtype=np.float64)
    ok = np.isfinite(y)
    positive = y[ok & (y > 0)]
    x, y = np.asarray(steps)[ok], np.clip(y[ok], positive.min() if positive.size else 1e-12, None)
    if x.size:
        ax.plot(x, y, **{"lw": 1.5, **line_kw})
    ax.set_yscale("log")
    ax.set_xlabel(_("step"))
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    return bool(x.size)


def loss_figure(losses: np.ndarray, ylabel: str = MSE_LABEL) -> "Figure | None":
    """``loss.png``'s figure (6.4 x 4.0 in): ``losses`` (n,) against step 0..n-1; None when none is finite."""
    fig = new_figure(6.4, 4.0)
    ax = fig.add_subplot()
    if not plot_loss(ax, np.arange(np.size(losses)), losses, ylabel):
        return None
    ax.set_title(_("loss"))
    return fig


def figure_bytes(fig: "Figure", fmt: str = "png") -> bytes:
    """``fig`` as the bytes of a ``fmt`` file, marked as attnlab's (:data:`attnlab.outputs.destination.MARKS`)."""
    buf = io.BytesIO()
    key = {"png": "Software", "svg": "Creator", "pdf": "Creator", "ps": "Creator", "eps": "Creator"}.get(fmt)
    fig.savefig(buf, format=fmt, **({"metadata": {key: "attnlab"}} if key else {}))
    return buf.getvalue()


def png(figure: Callable[..., "Figure | None"], *args: Any) -> bytes | None:
    """``figure(*args)`` drawn inside :func:`style` as a PNG file's bytes; None when it drew nothing."""
    with style():
        fig = figure(*args)
        return None if fig is None else figure_bytes(fig)


class FigureSink(Sink):
    """Writes ``attention_evolution.png`` (a GPT's also one per block) and ``loss.png`` into ``run_dir``
    at the end of a run, each unless there is nothing to draw. Memory stays flat: only the snapshots
    the figure will show and the latest one (for a run that stops early) are kept."""

    EVOLUTION = "attention_evolution.png"
    LAYER_EVOLUTION = "attention_evolution_layer{layer}.png"
    LOSS = "loss.png"

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.tokens: list[str] = []
        self.snapshots: list[Snapshot] = []
        self._losses: list[np.ndarray] = []
        self._shown: set[int] = set()  # steps the figure will show, known at on_start
        self._latest: Snapshot | None = None
        self._received = 0  # snapshots the run took
        self._ylabel = MSE_LABEL
        self._drawings: list[tuple[str, Drawing]] | None = None  # (file name, PNG bytes or None), from flush

    def on_start(self, info: RunInfo) -> None:
        self.tokens = list(info.tokens)
        self._shown = set(pick_snapshots(list(info.snapshot_steps)))
        self._ylabel = loss_axis_label([select(info.config, "train.objective")])

    def on_losses(self, steps: np.ndarray, losses: np.ndarray) -> None:
        self._losses.append(np.asarray(losses, dtype=np.float64))

    def on_snapshot(self, snapshot: Snapshot) -> None:
        self._received += 1
        if snapshot.step in self._shown:
            self.snapshots.append(snapshot)
        else:
            self._latest = snapshot

    @property
    def losses(self) -> np.ndarray:
        """Every loss received so far, ``(n,)`` float64."""
        return np.concatenate(self._losses) if self._losses else np.zeros(0)

    def flush(self) -> None:
        """The run is over: the figures start drawing (in a worker, see :mod:`attnlab.outputs.drawing`)."""
        snapshots = self.snapshots
        if self._latest is not None and (not snapshots or self._latest.step > snapshots[-1].step):
            snapshots = pick_snapshots(snapshots + [self._latest])  # an early stop: its last snapshot too
        figures = [(self.EVOLUTION, snapshots)] if snapshots else []
        for layer in range(0 if not snapshots or snapshots[0].layers is None else len(snapshots[0].layers)):
            figures.append((self.LAYER_EVOLUTION.format(layer=layer),  # a GPT's blocks
                            [dataclasses.replace(s, weights=s.layers[layer]) for s in snapshots]))
        # the loss figure sent first: a run waiting for the worker draws the newest
        loss = Drawing(png, loss_figure, self.losses, self._ylabel)
        self._drawings = [(name, Drawing(png, evolution_figure, shown, self.tokens, self._received))
                          for name, shown in figures]
        self._drawings.append((self.LOSS, loss))

    def on_end(self, result: RunResult) -> None:
        interrupts.pause_point("drawing")  # a test hook: the run's records are written, its figures not yet
        if self._drawings is None:
            self.flush()
        for name, drawing in self._drawings:
            if (data := drawing.result()) is not None:  # (no loss.png when no loss is finite)
                atomic_write(self.run_dir / name, data)
