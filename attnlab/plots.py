"""Matplotlib figures: the tutorial's attention-evolution figure, the loss curve, and the
heatmap image that TensorBoard shows.

Object API only (``Figure`` + ``FigureCanvasAgg``), never ``pyplot``: no global figure state,
no GUI backend, safe in sweeps and threads. Matplotlib is imported inside the functions, so
``import attnlab.plots`` costs nothing until a figure is drawn.

Fonts: when a CJK font is installed (Noto Sans CJK, WenQuanYi, SimHei, Source Han, ...) it is
used as a fallback after DejaVu Sans and the suptitle is the tutorial's Chinese one; otherwise
the title is English and any character no installed font can draw is shown escaped
(``\\u4f60``) instead of as an empty box with a "Glyph missing" warning.
"""
from __future__ import annotations

import functools
import io
import re
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

from attnlab.records import RunInfo, RunResult, Sink, Snapshot, head_mean

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

TITLE_ZH = "注意力权重的训练演化"
TITLE_EN = "Attention weights during training"
CMAP = "viridis"
MAX_PANELS = 10  # evolution figure: at most this many snapshots, evenly spaced
MAX_COLS = 5  # ... wrapped into rows of at most this many panels
PANEL_IN = (3.4, 3.6)  # inches per heatmap panel (width, height)
COLORBAR_IN = 0.9  # extra figure width for the shared colour bar
DPI = 100
_CJK_FONT = re.compile(
    r"CJK|WenQuanYi|WQY|SimHei|SimSun|Source Han|Microsoft YaHei|PingFang|Hiragino"
    r"|Heiti|Songti|Arial Unicode|Droid Sans Fallback|AR PL|Unifont",
    re.IGNORECASE,
)


# ---------------------------------------------------------------------------------- fonts
@functools.lru_cache(maxsize=None)
def cjk_font() -> str | None:
    """The family name of an installed CJK font, or None (first match in the font list)."""
    from matplotlib import font_manager

    names = sorted({f.name for f in font_manager.fontManager.ttflist if _CJK_FONT.search(f.name)})
    return names[0] if names else None


@functools.lru_cache(maxsize=None)
def _drawable() -> frozenset[int]:
    """Code points the fonts we use (DejaVu Sans + the CJK font, if any) have glyphs for."""
    from matplotlib import font_manager
    from matplotlib.ft2font import FT2Font

    points: set[int] = set()
    for family in ["DejaVu Sans"] + ([cjk_font()] if cjk_font() else []):
        path = font_manager.findfont(font_manager.FontProperties(family=family))
        points.update(FT2Font(path).get_charmap())
    return frozenset(points)


def rc() -> dict:
    """rcParams for every figure here (used with ``matplotlib.rc_context``)."""
    # a list of concrete families gives per-glyph fallback (matplotlib >= 3.6); a generic
    # "sans-serif" with the same list in font.sans-serif would use only the first one found
    families = ["DejaVu Sans"] + ([cjk_font()] if cjk_font() else [])
    return {"font.family": families, "axes.unicode_minus": False}


def drawable(text: str) -> str:
    """``text`` with each character no font here can draw escaped (``你`` -> ``\\u4f60``
    without a CJK font) and ``$`` escaped so it is never read as mathtext."""
    points = _drawable()
    out = []
    for ch in text:
        if ch == "$":
            out.append(r"\$")
        elif ord(ch) in points or ch in "\n\t":
            out.append(ch)
        else:
            out.append(f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}")
    return "".join(out)


def label(token: str) -> str:
    """A tick label for one token: stripped like the tutorial's ``t.strip()`` (a token that is
    only whitespace is shown as its ``repr``, ``' '``), then made :func:`drawable`."""
    return drawable(token.strip() or repr(token))


def default_title() -> str:
    """The tutorial's Chinese title when a CJK font is installed, else the English one."""
    return TITLE_ZH if cjk_font() else TITLE_EN


# ------------------------------------------------------------------------------- heatmaps
MAX_TOKEN_LABELS = 40  # longer texts get position ticks instead of token labels


def draw_heatmap(ax, w: np.ndarray, labels: Sequence[str], title: str):
    """One heatmap of ``w`` (T, T) on ``ax`` in the tutorial's style (viridis, [0, 1], token
    labels up to 40 tokens, cell values up to 12); returns the image for a colour bar."""
    t = w.shape[0]
    im = ax.imshow(w, cmap=CMAP, vmin=0.0, vmax=1.0)
    ax.set_title(title, fontsize=10)
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
                        color="black" if w[i, j] > 0.6 else "white")
    return im


def pick_snapshots(snapshots: Sequence, max_panels: int = MAX_PANELS) -> list:
    """At most ``max_panels`` of ``snapshots`` (Snapshot objects or their steps), evenly spaced
    by index, always first and last."""
    n = len(snapshots)
    if n <= max_panels:
        return list(snapshots)
    idx = np.unique(np.round(np.linspace(0, n - 1, max_panels)).astype(int))
    return [snapshots[i] for i in idx]


def evolution_figure(snapshots: Sequence[Snapshot], tokens: Sequence[str],
                     title: str | None = None, max_panels: int = MAX_PANELS) -> "Figure":
    """The tutorial's section-5 figure as a ``Figure`` (call inside ``rc_context(rc())``).

    One heatmap per snapshot, titled ``step=N\\nloss=X.XXX``, one shared colour bar over
    [0, 1]. With more than ``max_panels`` snapshots, ``max_panels`` evenly spaced ones are
    shown (first and last included) and the suptitle says "(k of n snapshots)"; panels wrap
    into rows of at most ``MAX_COLS``. Figure size is ``cols * 3.4 + 0.9`` by
    ``rows * 3.6 + 0.5`` inches at 100 dpi.
    """
    from matplotlib.figure import Figure
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    shown = pick_snapshots(snapshots, max_panels)
    n = len(shown)
    cols = min(n, MAX_COLS)
    rows = -(-n // cols)
    fig = Figure(figsize=(cols * PANEL_IN[0] + COLORBAR_IN, rows * PANEL_IN[1] + 0.5), dpi=DPI,
                 layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False)
    labels = [label(t) for t in tokens]
    im = None
    for ax, snap in zip(axes.flat, shown):
        im = draw_heatmap(ax, head_mean(snap.weights), labels,
                           f"step={snap.step}\nloss={snap.loss:.3f}")
    for ax in axes.flat[n:]:
        ax.set_axis_off()
    fig.colorbar(im, ax=axes, shrink=0.8, label="attention weight")
    title = default_title() if title is None else drawable(title)
    if n < len(snapshots):
        title += f"  ({n} of {len(snapshots)} snapshots)"
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


def attention_evolution(snapshots: Sequence[Snapshot], tokens: Sequence[str], path: Path,
                        title: str | None = None, max_panels: int = MAX_PANELS) -> Path:
    """Write the evolution figure (see :func:`evolution_figure`) to ``path`` as PNG.

    ``snapshots``: :class:`~attnlab.records.Snapshot` list in step order, weights ``(H, T, T)``
    or ``(T, T)``; ``tokens``: T labels. ``title`` None = Chinese/English default.
    """
    import matplotlib

    with matplotlib.rc_context(rc()):
        return save_figure(evolution_figure(snapshots, tokens, title, max_panels), path)


class HeatmapRenderer:
    """Renders successive attention heatmaps for one token list to ``(H_px, W_px, 3)`` uint8
    RGB arrays (HWC), for ``SummaryWriter.add_image(..., dataformats="HWC")``.

    One figure (460 x 400 px) is reused: the first call lays it out (constrained layout),
    later calls only swap the pixel data, cell values and title, about twice as fast.
    Colour scale fixed to [0, 1] so images at different steps compare.
    """

    def __init__(self, tokens: Sequence[str]):
        self.labels = [label(t) for t in tokens]
        self.fig = self.im = None

    def __call__(self, weights: np.ndarray, title: str = "") -> np.ndarray:
        """``weights``: ``(T, T)`` or ``(1, T, T)``; returns the RGB image."""
        import matplotlib
        from matplotlib.figure import Figure
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        w = head_mean(weights)
        with matplotlib.rc_context(rc()):
            if self.fig is None:
                self.fig = Figure(figsize=(4.6, 4.0), dpi=DPI, layout="constrained")
                FigureCanvasAgg(self.fig)
                self.ax = self.fig.add_subplot()
                self.im = draw_heatmap(self.ax, w, self.labels, drawable(title))
                self.fig.colorbar(self.im, ax=self.ax, shrink=0.85)
                self.fig.canvas.draw()
                self.fig.set_layout_engine("none")  # keep the layout of the first draw
            else:
                self.im.set_data(w)
                self.ax.set_title(drawable(title), fontsize=10)
                for text, value in zip(self.ax.texts, w.flat):
                    text.set_text(f"{value:.2f}")
                    text.set_color("black" if value > 0.6 else "white")
                self.fig.canvas.draw()
            return np.asarray(self.fig.canvas.buffer_rgba())[..., :3].copy()


def heatmap_array(weights: np.ndarray, tokens: Sequence[str], title: str = "") -> np.ndarray:
    """One attention heatmap as an HWC uint8 RGB array (see :class:`HeatmapRenderer`)."""
    return HeatmapRenderer(tokens)(weights, title)


def loss_curve(losses: np.ndarray, path: Path, title: str = "loss") -> Path | None:
    """Write ``loss.png``: loss ``(steps,)`` against step on a log y axis.

    Zeros are clipped to the smallest positive loss (1e-12 if there is none) so the log axis
    stays finite; non-finite losses (a diverged run) are left out. Returns None (no file)
    when there is no finite loss.
    """
    import matplotlib
    from matplotlib.figure import Figure
    from matplotlib.backends.backend_agg import FigureCanvasAgg

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


# ----------------------------------------------------------------------------------- sink
class FigureSink(Sink):
    """Writes ``attention_evolution.png`` and ``loss.png`` into ``run_dir`` at the end of a
    run (whatever its status); each is skipped silently when there is nothing to draw.

    Memory stays flat however many snapshots a run takes: only the snapshots the figure will
    show (chosen from ``RunInfo.snapshot_steps`` at the start, see :func:`pick_snapshots`) and
    the latest one (for a run that stops early) are kept.
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

    def on_start(self, info: RunInfo) -> None:
        self.tokens = list(info.tokens)
        self._shown = set(pick_snapshots(list(info.snapshot_steps)))

    def on_losses(self, steps: np.ndarray, losses: np.ndarray) -> None:
        self._losses.append(np.asarray(losses, dtype=np.float64))

    def on_snapshot(self, snapshot: Snapshot) -> None:
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
            attention_evolution(snapshots, self.tokens, self.run_dir / self.EVOLUTION)
        if losses.size:
            loss_curve(losses, self.run_dir / self.LOSS)
