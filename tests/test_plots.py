"""attnlab.outputs.plots: real PNGs, sizes that follow the panel count, no missing-glyph warnings."""
from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

from attnlab.core.records import RunInfo, RunResult, Snapshot
from attnlab.outputs import fonts as font_module
from attnlab.outputs import plots
from attnlab.outputs.tensorboard import HeatmapRenderer

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TOKENS = ["Your", " journey", " starts", " with", " one", " step"]
ZH_TOKENS = ["你", "的", "b'\\xe6\\x97'", "旅程", " 开始", "$5", "   "]


def snapshots(n: int, t: int = 6, seed: int = 0) -> list[Snapshot]:
    """n snapshots of random row-stochastic (1, t, t) weights, losses 1/(k+1)."""
    rng = np.random.default_rng(seed)
    return [Snapshot(step=10 * k, loss=1.0 / (k + 1),
                     weights=rng.dirichlet(np.ones(t), size=t)[None].astype(np.float32))
            for k in range(n)]


def read_png(path):
    import matplotlib.image

    assert path.read_bytes()[:8] == PNG_MAGIC
    return matplotlib.image.imread(str(path))  # (H, W, 4) float32


@pytest.fixture(params=["installed_fonts", "no_cjk_font"])
def fonts(request, monkeypatch):
    """Run a test with the fonts this machine has, and again as if no CJK font existed."""
    if request.param == "no_cjk_font":
        monkeypatch.setattr(font_module, "cjk_font", lambda: None)
    font_module._drawable.cache_clear()
    yield request.param
    font_module._drawable.cache_clear()


def test_evolution_png_size_follows_panel_count(tmp_path):
    sizes = {}
    for n in (2, 5):
        path = plots.attention_evolution(snapshots(n), TOKENS, tmp_path / f"evo{n}.png")
        assert path == tmp_path / f"evo{n}.png"
        img = read_png(path)
        sizes[n] = img.shape[:2]
        assert img.shape[2] in (3, 4)
    w_in, h_in = plots.PANEL_IN
    for n, (h, w) in sizes.items():
        assert w == round((n * w_in + plots.COLORBAR_IN) * plots.DPI)
        assert h == round((h_in + 0.5) * plots.DPI)
    assert sizes[5][1] - sizes[2][1] == round(3 * w_in * plots.DPI)
    # the atomic write left no temp file behind
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evo2.png", "evo5.png"]


def test_many_snapshots_are_thinned_and_wrapped(tmp_path):
    snaps = snapshots(23)
    shown = plots.pick_snapshots(snaps)
    assert len(shown) == plots.MAX_PANELS
    assert shown[0] is snaps[0]
    assert shown[-1] is snaps[-1]
    fig = plots.evolution_figure(snaps, TOKENS)
    assert "(10 of 23 snapshots)" in fig._suptitle.get_text()
    heatmaps = [ax for ax in fig.axes if ax.images and ax.get_label() != "<colorbar>"]
    titles = [f"step={s.step}\nloss={s.loss:.3f}" for s in shown]
    assert [ax.get_title() for ax in heatmaps] == titles
    h, w = read_png(plots.attention_evolution(snaps, TOKENS, tmp_path / "many.png")).shape[:2]
    assert w == round((plots.MAX_COLS * plots.PANEL_IN[0] + plots.COLORBAR_IN) * plots.DPI)
    assert h == round((2 * plots.PANEL_IN[1] + 0.5) * plots.DPI)  # 10 panels -> 2 rows


def test_evolution_panels_match_the_tutorial():
    snaps = snapshots(3)
    fig = plots.evolution_figure(snaps, TOKENS)
    ax = fig.axes[0]
    im = ax.images[0]
    assert im.get_clim() == (0.0, 1.0)
    np.testing.assert_allclose(im.get_array(), snaps[0].weights[0], rtol=1e-6)
    assert [t.get_text() for t in ax.get_xticklabels()] == [t.strip() for t in TOKENS]
    assert all(t.get_rotation() == 45 for t in ax.get_xticklabels())
    cells = [t.get_text() for t in ax.texts]
    assert len(cells) == 36
    assert cells[0] == f"{snaps[0].weights[0, 0, 0]:.2f}"
    assert fig._suptitle.get_text() == plots.default_title()
    big = plots.evolution_figure(snapshots(1, t=13), [f"t{i}" for i in range(13)])
    assert len(big.axes[0].texts) == 0  # no cell values for T > 12


def test_chinese_tokens_render_without_missing_glyphs(tmp_path, fonts):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plots.attention_evolution(snapshots(2, t=len(ZH_TOKENS)), ZH_TOKENS, tmp_path / "zh.png")
        img = HeatmapRenderer(ZH_TOKENS)(snapshots(1, t=len(ZH_TOKENS))[0].weights, "你的")
    assert [str(w.message) for w in caught if "Glyph" in str(w.message)] == []
    assert img.dtype == np.uint8
    assert img.ndim == 3
    assert img.shape[2] == 3
    read_png(tmp_path / "zh.png")
    labels = [font_module.label(t) for t in ZH_TOKENS]
    assert labels[2] == "b'\\xe6\\x97'"
    assert labels[5] == r"\$5"
    assert labels[6] == "'   '"
    if fonts == "no_cjk_font" or font_module.cjk_font() is None:
        assert font_module.default_title() == font_module.TITLE_EN
        assert labels[:2] == ["\\u4f60", "\\u7684"]
        assert labels[4] == "\\u5f00\\u59cb"
    else:
        assert font_module.default_title() == font_module.TITLE_ZH
        assert labels[:2] == ["你", "的"]
        assert labels[4] == "开始"


def test_heatmap_image_is_hwc_uint8():
    w = np.full((6, 6), 1 / 6, dtype=np.float32)
    img = HeatmapRenderer(TOKENS)(w, "step=0")
    assert img.shape == (400, 460, 3)
    assert img.dtype == np.uint8
    assert img.min() < 50
    assert img.max() == 255  # dark text/frame on a white background


def test_reused_renderer_matches_fresh_rendering():
    render = HeatmapRenderer(TOKENS)
    images = []
    for snap in snapshots(3):
        images.append(render(snap.weights, f"step={snap.step}"))
        fresh = HeatmapRenderer(TOKENS)(snap.weights, f"step={snap.step}")
        np.testing.assert_array_equal(images[-1], fresh)
    assert not np.array_equal(images[0], images[1])


def test_loss_curve_log_axis_with_zeros(tmp_path):
    losses = np.array([2.0, 1.0, 0.1, 0.0, 1e-6, 0.0])
    path = plots.loss_curve(losses, tmp_path / "loss.png")
    h, w = read_png(path).shape[:2]
    assert (w, h) == (640, 400)
    assert plots.loss_curve(np.array([np.nan]), tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()


def test_figure_sink_writes_both_pngs(tmp_path):
    info = RunInfo(config={}, token_ids=list(range(6)), tokens=TOKENS, snapshot_steps=[0, 10],
                   steps=11, focus_token=1, run_dir=tmp_path)
    sink = plots.FigureSink(tmp_path)
    sink.on_start(info)
    sink.on_losses(np.arange(5), np.linspace(2, 1, 5))
    sink.on_snapshot(snapshots(1)[0])
    sink.on_losses(np.arange(5, 11), np.linspace(1, 0.1, 6))
    sink.on_end(RunResult("completed", 11, 0.1, 0.5))
    sink.close()
    assert sink.losses.dtype == np.float64
    assert sink.losses.shape == (11,)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["attention_evolution.png", "loss.png"]
    read_png(tmp_path / "attention_evolution.png")


def test_figure_sink_failed_early_writes_nothing(tmp_path):
    sink = plots.FigureSink(tmp_path)
    sink.on_end(RunResult("failed", 0, None, 0.0, error="boom"))
    sink.close()
    assert list(tmp_path.iterdir()) == []


def test_import_is_cheap():
    code = "import sys, attnlab.outputs.plots; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def fresh_evolution_png(snaps, tokens, path, title):
    """The evolution figure made from scratch each time, laid out by matplotlib while it saves
    (what attnlab drew before layouts were reused): the reference for the reused layouts."""
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(font_module.rc()):
        fig = Figure(figsize=(len(snaps) * plots.PANEL_IN[0] + plots.COLORBAR_IN, plots.PANEL_IN[1] + 0.5),
                     dpi=plots.DPI, layout="constrained")
        axes = fig.subplots(1, len(snaps), squeeze=False)
        labels = [font_module.label(t) for t in tokens]
        for ax, s in zip(axes.flat, snaps):
            im = plots.draw_heatmap(ax, s.weights[0], labels, f"step={s.step}\nloss={s.loss:.3f}")
        fig.colorbar(im, ax=axes, shrink=0.8, label="attention weight")
        fig.suptitle(title, fontsize=13)
        fig.savefig(path)
    return read_png(path)


def fresh_loss_png(losses, path, title):
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    with matplotlib.rc_context(font_module.rc()):
        fig = Figure(figsize=(6.4, 4.0), dpi=plots.DPI)
        FigureCanvasAgg(fig)
        fig.subplots_adjust(left=0.13, right=0.97, bottom=0.12, top=0.91)
        ax = fig.add_subplot()
        plots.plot_loss(ax, np.arange(len(losses)), losses)
        ax.set_title(title)
        plots.fit_left_margin(fig, ax)
        fig.savefig(path)
    return read_png(path)


def test_reused_figures_give_the_pixels_of_fresh_ones(tmp_path):
    """A sweep's jobs redraw one laid-out figure per text (plots.EvolutionLayout, LossLayout):
    each PNG equals, pixel for pixel, the figure made and laid out from scratch, whatever was
    drawn into the reused figure before."""
    runs = [snapshots(3, seed=s) for s in range(3)] + [snapshots(3, seed=0)]
    for k, snaps in enumerate(runs):  # the same layout, reused 3 times
        got = read_png(plots.attention_evolution(snaps, TOKENS, tmp_path / f"evo{k}.png"))
        want = fresh_evolution_png(snaps, TOKENS, tmp_path / f"ref{k}.png", plots.default_title())
        assert got.shape == want.shape
        assert np.array_equal(got, want), f"run {k}: {int((got != want).any(-1).sum())} pixels differ"
    assert not np.array_equal(read_png(tmp_path / "evo0.png"), read_png(tmp_path / "evo1.png"))
    curves = [np.exp(-np.linspace(0, 8, 201)) * 2.3, np.r_[np.linspace(2, 50, 30), np.inf, np.nan],
              np.r_[np.exp(-np.linspace(0, 5, 40)), np.zeros(5)], np.abs(np.sin(np.arange(3000))) + 1e-3]
    for k, y in enumerate(curves):
        got = read_png(plots.loss_curve(y, tmp_path / f"loss{k}.png", title=f"loss {k}"))
        assert np.array_equal(got, fresh_loss_png(y, tmp_path / f"lref{k}.png", f"loss {k}")), f"curve {k}"


@pytest.mark.parametrize("heads, n, t", [(1, 2, 6), (1, 5, 6), (2, 3, 6), (1, 9, 6), (1, 3, 12), (3, 2, 4)])
def test_the_copied_background_gives_savefigs_png_byte_for_byte(heads, n, t):
    """evolution_png draws only the changing parts over a copy of the rest
    (EvolutionLayout.png): its bytes are those of a full savefig of the same figure laid out
    from scratch, for the first and for a later use of a layout."""
    import matplotlib

    tokens = [f"tok{i}" for i in range(t)]
    rng = np.random.default_rng(heads * 100 + n * 10 + t)
    for _ in range(2):
        snaps = [Snapshot(10 * i, 1.0 / (i + 1), rng.dirichlet(np.ones(t), size=(heads, t)).astype(np.float32))
                 for i in range(n)]
        with matplotlib.rc_context(font_module.rc()):
            full = plots.figure_bytes(plots.evolution_figure(snaps, tokens, reuse=False))
        assert plots.evolution_png(snaps, tokens) == full


@pytest.mark.parametrize("losses", [np.linspace(0.0131, 0.0125, 100), np.linspace(0.9, 0.5, 100),
                                    np.linspace(1500, 900, 100), 2.36 * np.exp(-np.linspace(0, 8, 201)),
                                    np.linspace(1.31e-3, 1.25e-3, 50)],
                         ids=["narrow_0.01", "narrow_0.5", "narrow_1000", "tutorial", "narrow_0.001"])
def test_loss_png_keeps_its_tick_labels_and_y_label_inside(losses):
    """loss.png's left margin holds the y axis whatever the loss spans: a loss within less than
    a decade has labels like 1.31×10^-2 on its minor ticks, which pushed the y label off a
    fixed margin (plots.fit_left_margin widens it)."""
    import matplotlib

    with matplotlib.rc_context(font_module.rc()):
        layout = plots.LossLayout()
        fig = layout.draw(np.asarray(losses, dtype=np.float64), "loss")
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        shown = [t for t in layout.ax.yaxis.get_ticklabels(which="both") if t.get_visible() and t.get_text()]
        assert shown, "no y tick label"
        for artist in [*shown, layout.ax.yaxis.label]:
            box = artist.get_window_extent(renderer)
            assert box.x0 >= 0 and box.x1 <= fig.bbox.x1, (artist.get_text(), box)


def test_a_matplotlibrc_in_the_working_directory_changes_no_figure(tmp_path):
    """Figures are part of what a run reproduces: matplotlib's own defaults, not the style of a
    matplotlibrc where the run starts (matplotlib reads ./matplotlibrc when it is imported)."""
    import hashlib

    code = ("import hashlib, numpy as np\n"
            "from attnlab.outputs import plots\n"
            "from attnlab.core.records import Snapshot\n"
            "w = np.full((1, 3, 3), 1 / 3, np.float32)\n"
            "evo = plots.evolution_png([Snapshot(0, 1.0, w), Snapshot(9, 0.5, w)], ['a', 'b', 'c'])\n"
            "loss = plots.loss_png(np.linspace(2, 0.1, 10))\n"
            "print(hashlib.sha256(evo + loss).hexdigest())\n")
    styled, plain = tmp_path / "styled", tmp_path / "plain"
    styled.mkdir()
    plain.mkdir()
    (styled / "matplotlibrc").write_text("axes.facecolor: red\nlines.linewidth: 9\nfont.size: 20\n"
                                         "image.cmap: gray\naxes.grid: True\n")
    env = {**os.environ, "MPLBACKEND": "Agg", "MPLCONFIGDIR": str(tmp_path / "cfg")}
    digests = [subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=120).stdout.strip() for cwd in (styled, plain)]
    assert len(digests[0]) == 64 and digests[0] == digests[1]
    assert hashlib.sha256(b"").hexdigest() not in digests


def test_layouts_are_per_thread_and_bounded(tmp_path, monkeypatch):
    import threading
    from collections import OrderedDict

    monkeypatch.setattr(plots, "_layouts", OrderedDict())  # none from earlier tests
    plots.attention_evolution(snapshots(2), TOKENS, tmp_path / "main.png")
    other = threading.Thread(target=plots.attention_evolution, args=(snapshots(2), TOKENS, tmp_path / "t.png"))
    other.start()
    other.join()
    mine = [key for key in plots._layouts if key[-1] == threading.get_ident()]
    assert (len(mine), len(plots._layouts)) == (1, 2)  # the other thread made its own
    for t in range(3, 3 + plots.MAX_LAYOUTS + 2):  # more token lists than are kept
        plots.attention_evolution(snapshots(2, t=t), [f"t{i}" for i in range(t)], tmp_path / f"t{t}.png")
    assert len(plots._layouts) == plots.MAX_LAYOUTS
    assert np.array_equal(read_png(tmp_path / "main.png"), read_png(tmp_path / "t.png"))
