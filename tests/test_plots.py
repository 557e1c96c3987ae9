"""attnlab.outputs.plots: real PNGs (sizes that follow the panel count, drawn pixels), the
tutorial's panel content, no missing-glyph warnings, figures independent of the user's style."""
from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

from attnlab.core.records import RunInfo, RunResult, Snapshot
from attnlab.outputs import fonts as font_module
from attnlab.outputs import plots

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
    img = matplotlib.image.imread(str(path))  # (H, W, 4) float32
    assert len(np.unique(img.reshape(-1, img.shape[2]), axis=0)) > 50  # drawn: far more than a blank page
    return img


def test_evolution_png_size_follows_panel_count(tmp_path):
    path = tmp_path / "evo2.png"
    path.write_bytes(plots.png(plots.evolution_figure, snapshots(2), TOKENS))
    w_in, h_in = plots.PANEL_IN
    assert read_png(path).shape[:2] == (round((h_in + 0.5) * plots.DPI), round((2 * w_in + plots.COLORBAR_IN) * plots.DPI))
    fig = plots.evolution_figure(snapshots(5, t=3), TOKENS[:3])  # the PNG is the canvas (no tight bbox)
    assert fig.canvas.get_width_height() == (round((5 * w_in + plots.COLORBAR_IN) * plots.DPI),
                                             round((h_in + 0.5) * plots.DPI))


def test_many_snapshots_are_thinned_and_wrapped():
    snaps = snapshots(23, t=3)
    shown = plots.pick_snapshots(snaps)
    assert len(shown) == plots.MAX_PANELS
    assert shown[0] is snaps[0]
    assert shown[-1] is snaps[-1]
    fig = plots.evolution_figure(snaps, TOKENS[:3])
    assert "(10 of 23 snapshots)" in fig._suptitle.get_text()
    heatmaps = [ax for ax in fig.axes if ax.images and ax.get_label() != "<colorbar>"]
    assert [ax.get_title() for ax in heatmaps] == [f"step={s.step}\nloss={s.loss:.3f}" for s in shown]
    assert fig.canvas.get_width_height() == (round((plots.MAX_COLS * plots.PANEL_IN[0] + plots.COLORBAR_IN) * plots.DPI),
                                             round((2 * plots.PANEL_IN[1] + 0.5) * plots.DPI))  # 2 rows of 5


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
    assert fig._suptitle.get_text() == "Attention weights during training"
    big = plots.evolution_figure(snapshots(1, t=13), [f"t{i}" for i in range(13)])
    assert len(big.axes[0].texts) == 0  # no cell values for T > 12


def test_chinese_tokens_render_without_missing_glyphs(tmp_path):
    """No system CJK font is needed: the shipped subset of Noto Sans CJK SC draws GB 2312's hanzi."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (tmp_path / "zh.png").write_bytes(plots.png(plots.evolution_figure, snapshots(2, t=len(ZH_TOKENS)), ZH_TOKENS))
        img = plots.heatmap_pixels(ZH_TOKENS, snapshots(1, t=len(ZH_TOKENS))[0].weights, "你的")
    assert [str(w.message) for w in caught if "Glyph" in str(w.message)] == []
    assert img.dtype == np.uint8
    assert img.ndim == 3
    assert img.shape[2] == 3
    read_png(tmp_path / "zh.png")
    labels = [font_module.label(t) for t in ZH_TOKENS]
    assert labels[2] == "b'\\xe6\\x97'"
    assert labels[5] == r"\$5"
    assert labels[6] == "'   '"
    assert labels[:2] == ["你", "的"]
    assert labels[4] == "开始"
    from matplotlib.ft2font import FT2Font

    shipped = FT2Font(str(font_module.SHIPPED_FONT)).get_charmap()
    assert {ord(c) for c in "你的旅程今天气，。"} <= set(shipped) and ord("體") not in shipped  # GB 2312: simplified


def test_figure_titles_follow_the_language():
    from attnlab.core import i18n

    assert plots.evolution_figure(snapshots(1, t=3), TOKENS[:3])._suptitle.get_text() == "Attention weights during training"
    try:
        i18n.set_language("zh")
        fig = plots.evolution_figure(snapshots(1, t=3), TOKENS[:3])
        assert fig._suptitle.get_text() == "注意力权重的训练演化"  # tutorial §5's title
        assert fig.axes[-1].get_ylabel() == "注意力权重"
    finally:
        i18n.set_language("en")


def test_heatmap_image_is_hwc_uint8_with_the_weights_drawn():
    w = np.full((6, 6), 1 / 6, dtype=np.float32)
    w[1] = [0.9, 0.1, 0, 0, 0, 0]
    img = plots.heatmap_pixels(TOKENS, w, "step=0")
    assert img.shape == (400, 460, 3)
    assert img.dtype == np.uint8
    assert img.min() < 50
    assert img.max() == 255  # dark text and frame on a white background
    import matplotlib

    colours = {tuple(c) for c in img.reshape(-1, 3).tolist()}
    assert tuple(matplotlib.colormaps["viridis"](0.9, bytes=True)[:3]) in colours  # the brightest cell
    other = plots.heatmap_pixels(TOKENS, np.full((6, 6), 1 / 6, np.float32), "step=0")
    assert not np.array_equal(img, other)


def test_loss_curve_log_axis_with_zeros(tmp_path):
    losses = np.array([2.0, 1.0, 0.1, 0.0, 1e-6, 0.0])
    (tmp_path / "loss.png").write_bytes(plots.png(plots.loss_figure, losses))
    h, w = read_png(tmp_path / "loss.png").shape[:2]
    assert (w, h) == (640, 400)
    assert plots.png(plots.loss_figure, np.array([np.nan])) is None


@pytest.mark.parametrize("losses", [np.linspace(0.0131, 0.0125, 100), np.linspace(1500, 900, 100),
                                    2.36 * np.exp(-np.linspace(0, 8, 201))], ids=["narrow_0.01", "narrow_1000", "tutorial"])
def test_loss_figure_keeps_its_tick_labels_and_y_label_inside(losses):
    """A loss within less than a decade has labels like 1.31×10^-2 on its minor ticks: the
    y label still lies inside the figure."""

    with font_module.style():
        fig = plots.loss_figure(np.asarray(losses, dtype=np.float64))
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        [ax] = fig.axes
        shown = [t for t in ax.yaxis.get_ticklabels(which="both") if t.get_visible() and t.get_text()]
        assert shown, "no y tick label"
        for artist in [*shown, ax.yaxis.label, ax.title]:
            box = artist.get_window_extent(renderer)
            assert box.x0 >= 0 and box.x1 <= fig.bbox.x1, (artist.get_text(), box)


def _die_outside(pid: int) -> str:
    """Kills the worker it runs in; returns where it ran when that is process ``pid``."""
    if os.getpid() != pid:
        os._exit(1)
    return "here"


def _pid_after(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def test_workers_draw_the_same_bytes_and_a_dead_or_missing_pool_draws_here(monkeypatch, figure_worker):
    from types import SimpleNamespace

    from attnlab.outputs import drawing

    job = SimpleNamespace(task=drawing.Task.train, logging=SimpleNamespace(figures=True, tensorboard=False, images=True))
    snaps, losses = snapshots(3), np.linspace(2, 0.01, 50)
    drawing.start(job, plots.warm_up)
    try:
        evolution = drawing.Drawing(plots.png, plots.evolution_figure, snaps, TOKENS, 7)
        loss = drawing.Drawing(plots.png, plots.loss_figure, losses)
        heatmap = drawing.Drawing(plots.heatmap_pixels, TOKENS, snaps[1].weights, "step=10")
        assert evolution.future is not None or (os.cpu_count() or 1) < 2  # sent to a worker (one core: drawn here)
        concurrent.futures.wait([d.future for d in (evolution, loss, heatmap) if d.future is not None])
        assert evolution.result() == plots.png(plots.evolution_figure, snaps, TOKENS, 7)  # the worker's bytes
        assert loss.result() == plots.png(plots.loss_figure, losses)
        np.testing.assert_array_equal(heatmap.result(), plots.heatmap_pixels(TOKENS, snaps[1].weights, "step=10"))
        busy = [drawing.Drawing(_pid_after, 0.8) for _ in range(4)]  # one drawn, one queued in the worker
        while not (busy[0].future.running() and busy[1].future.running()):
            time.sleep(0.01)
        late = drawing.Drawing(_pid_after, 0)
        assert late.result() == os.getpid()  # not started by the worker: drawn here, at once
        assert busy[0].result() != os.getpid()  # the worker's; waiting for it, the run drew the newest not started
        assert busy[3].future.done() and busy[3].result() == os.getpid()
        assert busy[1].result() != os.getpid()
        dying = drawing.Drawing(_die_outside, os.getpid())
        concurrent.futures.wait([dying.future])
        assert dying.result() == "here"  # the worker died: drawn here
        assert drawing._pool is None  # ... and the broken pool is gone
        assert drawing.Drawing(plots.png, plots.loss_figure, losses).result() == plots.png(plots.loss_figure, losses)
    finally:
        drawing.shutdown()
    monkeypatch.setattr("multiprocessing.get_context", lambda method: (_ for _ in ()).throw(OSError("no processes")))
    drawing.start(job)  # a pool that cannot start
    assert drawing._pool is None
    assert drawing.Drawing(_die_outside, os.getpid()).result() == "here"
    drawing.start(SimpleNamespace(task=drawing.Task.train, logging=SimpleNamespace(figures=False, tensorboard=True,
                                                                                    images=False)))
    assert drawing._pool is None  # nothing to draw: no pool


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


def test_the_users_matplotlib_style_changes_no_figure():
    """Figures are part of what a run reproduces: drawn with matplotlib's own defaults (fonts.style),
    not the style of a matplotlibrc or of rcParams set by the caller."""
    import matplotlib

    w = np.full((1, 3, 3), 1 / 3, np.float32)

    def both() -> bytes:
        with font_module.style():
            evolution = plots.figure_bytes(plots.evolution_figure([Snapshot(0, 1.0, w), Snapshot(9, 0.5, w)], "abc"))
        return evolution + plots.png(plots.loss_figure, np.linspace(2, 0.1, 10))

    plain = both()
    with matplotlib.rc_context({"axes.facecolor": "red", "lines.linewidth": 9, "font.size": 20,
                                "image.cmap": "gray", "axes.grid": True}):
        styled = both()
    assert styled == plain
