"""The figure of ``attnlab-compare --plot``: the runs' loss curves, focus weights and last heatmaps."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from attnlab.core.config import loss_axis_label
from attnlab.core.focus import FOCUS_THRESHOLD
from attnlab.core.i18n import _
from attnlab.outputs import destination, fonts
from attnlab.outputs.fonts import drawable
from attnlab.outputs.plots import draw_heatmap, figure_bytes, new_figure, plot_loss
from attnlab.saved.swept import LINESTYLES, PALETTE, run_labels, run_styles, wrap

MAX_HEATMAPS = 8  # at most this many heatmap panels
HEATMAP_COLS = 4  # ... per row


def comparison_figure(rows: Sequence[dict[str, Any]], path: Path, force: bool = False) -> Path:
    """Write one PNG to ``path``: loss curves on a log axis (non-finite losses left out), each run's focus
    weight at every snapshot (heads averaged) and up to :data:`MAX_HEATMAPS` last-snapshot heatmaps (colour
    scale [0, 1]), titled by job number and swept values wrapped to the panel; written atomically."""
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize
    from matplotlib.lines import Line2D

    TITLE_CHARS, MAX_TITLE_LINES = 34, 3  # heatmap titles: name and swept values wrapped at 34 characters
    legend = run_labels(rows)  # "3: lr=0.05"

    def panel_title(name: str, what: str) -> str:  # "3: lr=0.05 steps=120" wrapped to the panel, then "step=29"
        lines = wrap(name, TITLE_CHARS, MAX_TITLE_LINES, measure=lambda s: len(drawable(s)))
        return "\n".join(drawable(line) for line in [*lines, what])

    curves, maps, objectives, focus, drawn = [], [], [], [], {}
    styles = run_styles(rows) or curve_styles(len(rows))  # by row: a run has one style in both axes
    for i, (r, name, style) in enumerate(zip(rows, legend, styles)):  # what collect_rows read
        if r.get("metrics") is not None and r["metrics"][1].size:
            curves.append((style, *r["metrics"]))
            drawn[i] = (drawable(name), style)
            objectives.append(r.get("objective"))
        if r.get("focus_curve") is not None:
            focus.append((style, *r["focus_curve"]))
            drawn[i] = (drawable(name), style)
        if r.get("heatmap") is not None:
            step, w, labels = r["heatmap"]
            maps.append((panel_title(name, "walkthrough" if step is None else f"step={step}"), w, labels))
    shown = maps[:MAX_HEATMAPS]
    n = max(len(shown), 1)
    cols = min(n, HEATMAP_COLS)
    grid_rows = -(-n // cols)
    row_in = 3.5 + 0.17 * max([t.count("\n") + 1 for t, _, _ in shown], default=2)  # a title's lines
    more = f" ({len(shown)} of {len(maps)})" if len(maps) > len(shown) else ""
    width = max(9.0, 3.4 * cols + 0.9)
    # the key below both axes, in columns (a name per style); more runs than styles: a colour scale by row
    keyed = list(drawn.values()) if len(rows) <= len(STYLES) else []
    key_cols = max(1, min(len(keyed), int((width - 0.4) // (0.6 + 0.055 * max((len(n) for n, _ in keyed), default=1)))))
    key_in = 0.15 * -(-len(keyed) // key_cols) + 0.1 if keyed else 0.0
    with fonts.style():
        fig = new_figure(width, 4.6 + key_in + row_in * grid_rows)
        # one grid: the loss axes, the key and a heading row (empty axes whose legend and title the
        # layout makes room for, so no panel title runs into them), then the heatmaps
        grid = fig.add_gridspec(3 + grid_rows, cols, height_ratios=[4.3, 0.01, 0.01] + [row_in] * grid_rows)
        ax, fax = (fig.add_subplot(g) for g in grid[0, :].subgridspec(1, 2, width_ratios=[3, 2]))
        ylabel = loss_axis_label(objectives)
        lw = 1.4 if keyed or len(rows) <= 1 else 0.8
        for style, steps, losses in curves or [({}, np.zeros(0), np.zeros(0))]:  # no curve: the axes still
            plot_loss(ax, steps, losses, ylabel, lw=lw, **style)
        ax.set_title(_("loss") if curves else _("loss (no training runs)"))
        # the focus weight at each snapshot (heads averaged): how fast each run's attention focuses
        for style, steps, weights in focus:
            fax.plot(steps, weights, marker="." if keyed else None, lw=lw, **style)
        fax.axhline(FOCUS_THRESHOLD, color="0.5", lw=0.8, ls="--")
        fax.set(ylim=(0, 1.02), xlabel=_("step"), ylabel=_("strongest weight"), title=_("focus token's attention"))
        fax.grid(True, alpha=0.3)
        key, heading = fig.add_subplot(grid[1, :]), fig.add_subplot(grid[2, :])
        if keyed:
            key.legend([Line2D([], [], lw=1.4, **style) for _, style in keyed], [name for name, _ in keyed],
                       loc="upper center", bbox_to_anchor=(0.5, 1.0), ncols=key_cols, fontsize=7, frameon=False)
        elif len(rows) > 1:
            scale = ScalarMappable(Normalize(0, len(rows) - 1), RUN_COLORMAP)
            fig.colorbar(scale, ax=[ax, fax], aspect=40,
                         label=_("run: its row in the table (0 to {last})").format(last=len(rows) - 1))
        heading.set_title(_("attention at the last snapshot") + more, fontsize=11)
        axes = [fig.add_subplot(grid[3 + i // cols, i % cols]) for i in range(grid_rows * cols)]
        for a, (title, w, labels) in zip(axes, shown):
            im = draw_heatmap(a, w, labels, title)  # title: made drawable line by line
            if w.shape[0] > 12:  # smaller token labels, so long texts' ticks do not run into each other
                a.tick_params(labelsize=6 if w.shape[0] <= 24 else 5)
        for a in [key, heading, *axes[len(shown):]]:
            a.set_axis_off()
        if shown:
            fig.colorbar(im, ax=axes, shrink=0.8, label=_("attention weight"))
        return destination.write(path, figure_bytes(fig, Path(path).suffix.lstrip(".").lower() or "png"),
                                 key="--plot", kind="figure", force=force)


RUN_COLORMAP = "turbo"  # more runs than distinct styles: the colour of a run's row
STYLES = [{"color": c, "linestyle": ls} for ls in LINESTYLES for c in PALETTE]  # the report's 40 too


def curve_styles(n: int) -> list[dict[str, str]]:
    """Each of ``n`` curves' style: :data:`STYLES` in turn, or for more curves :data:`RUN_COLORMAP`, solid."""
    if n <= len(STYLES):
        return STYLES[:n]
    import matplotlib

    cmap = matplotlib.colormaps[RUN_COLORMAP]
    return [{"color": matplotlib.colors.to_hex(cmap(i / (n - 1))), "linestyle": "-"} for i in range(n)]
