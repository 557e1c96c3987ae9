"""The figure of ``attnlab-compare --plot``: the runs' loss curves overlaid and each run's last
attention heatmap, drawn with :mod:`attnlab.outputs.plots`."""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from attnlab.core.config import loss_axis_label
from attnlab.core.errors import RunDirError
from attnlab.core.focus import FOCUS_THRESHOLD, focus_weights
from attnlab.core.i18n import _
from attnlab.outputs.fonts import drawable, label, rc
from attnlab.outputs.plots import DPI, draw_heatmap, plot_loss, save_figure
from attnlab.saved import safe_read
from attnlab.saved.runs import last_attention
from attnlab.saved.safe_read import ATTENTION, METRICS
from attnlab.saved.swept import run_labels, short_names, wrap

MAX_HEATMAPS = 8  # at most this many heatmap panels
HEATMAP_COLS = 4  # ... per row


def comparison_figure(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    """Write one PNG to ``path``: loss curves on a log axis (top left; non-finite losses left out),
    each run's focus weight at every snapshot (top right, :func:`attnlab.core.focus.focus_weights`) and up
    to :data:`MAX_HEATMAPS` last-snapshot heatmaps (colour scale [0, 1]), titled by job number and
    swept values wrapped to the panel; constrained layout, written atomically."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    TITLE_CHARS, MAX_TITLE_LINES = 34, 3  # heatmap titles: name and swept values wrapped at 34 characters
    names = short_names([r["job"] for r in rows])
    legend = [f"{name}: {values}" if values else name for name, values in run_labels(rows, names)]  # "3: lr=0.05"

    def panel_title(name: str, what: str) -> str:  # "3: lr=0.05 steps=120" wrapped to the panel, then "step=29"
        lines = wrap(name, TITLE_CHARS, MAX_TITLE_LINES, measure=lambda s: len(drawable(s)))
        return "\n".join(drawable(line) for line in [*lines, what])

    curves, maps, objectives, focus = [], [], [], []
    for r, name in zip(rows, legend):
        run_dir = Path(r["path"])
        root = Path(r.get("root") or run_dir)  # no link below the PATH the run was found under is followed
        metrics = last = None
        with contextlib.suppress(RunDirError):  # the row names a file that cannot be read
            metrics = safe_read.read_run_metrics(run_dir, root=root) if safe_read.exists(run_dir, METRICS) else None
        with contextlib.suppress(RunDirError):
            last = last_attention(run_dir, root=root)
        with contextlib.suppress(RunDirError, ValueError):  # ValueError: no such focus token
            if safe_read.exists(run_dir, ATTENTION) and last is not None:
                with safe_read.open_attention(run_dir, root=root) as npz:
                    focus.append((name, npz.read("steps"), focus_weights(npz.read("weights"), r["focus_query"])))
        if metrics is not None and metrics[1].size:
            curves.append((name, *metrics))
            objectives.append(r.get("objective"))
        if last is not None:
            w, labels, step = last
            maps.append((panel_title(name, "walkthrough" if step is None else f"step={step}"), w, labels))
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
        ax, fax = (fig.add_subplot(g) for g in grid[0, :].subgridspec(1, 2, width_ratios=[3, 2]))
        ylabel = loss_axis_label(objectives)
        for (name, steps, losses), style in zip(curves, curve_styles(len(curves))):
            plot_loss(ax, steps, losses, ylabel, label=drawable(name), lw=1.4, **style)
        if not curves:
            plot_loss(ax, np.zeros(0), np.zeros(0), ylabel)
        ax.set_title(_("loss") if curves else _("loss (no training runs)"))
        if curves:
            ax.legend(fontsize=7, loc="best")
        # the focus weight at each snapshot (heads averaged): how fast each run's attention focuses
        for (name, steps, weights), style in zip(focus, curve_styles(len(focus))):
            fax.plot(steps, weights, marker=".", lw=1.4, label=drawable(name), **style)
        fax.axhline(FOCUS_THRESHOLD, color="0.5", lw=0.8, ls="--")
        fax.set(ylim=(0, 1.02), xlabel=_("step"), ylabel=_("strongest weight"), title=_("focus token's attention"))
        fax.grid(True, alpha=0.3)
        heading = fig.add_subplot(grid[1, :])
        heading.set_axis_off()
        heading.set_title(_("attention at the last snapshot") + more, fontsize=11)
        axes = [fig.add_subplot(grid[2 + i // cols, i % cols]) for i in range(grid_rows * cols)]
        im = None
        for a, (title, w, labels) in zip(axes, shown):
            im = draw_heatmap(a, w, [label(t) for t in labels], title)  # title: made drawable line by line
            if w.shape[0] > 12:  # smaller token labels, so long texts' ticks do not run into each other
                a.tick_params(labelsize=6 if w.shape[0] <= 24 else 5)
        for a in axes[len(shown):]:
            a.set_axis_off()
        if im is not None:
            fig.colorbar(im, ax=axes, shrink=0.8, label=_("attention weight"))
        path = Path(path)
        if not path.parent.exists():
            raise RunDirError(f"--plot {path}: folder {path.parent} does not exist")
        return save_figure(fig, path)


LINESTYLES = ("-", "--", ":", "-.")


def curve_styles(n: int) -> list[dict[str, str]]:
    """Colour and line style of ``n`` curves: 10 colours, then dashed, dotted, dash-dotted."""
    import matplotlib

    colors = matplotlib.rcParams["axes.prop_cycle"].by_key().get("color") or ["C0"]
    return [{"color": colors[i % len(colors)], "linestyle": LINESTYLES[i // len(colors) % len(LINESTYLES)]}
            for i in range(n)]
