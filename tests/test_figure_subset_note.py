"""The evolution figure of a run with more than 10 snapshots says it shows a subset, through the
real path: FigureSink keeps only the drawn snapshots, so the count must come from the sink."""
from __future__ import annotations

import numpy as np
import pytest

from attnlab.core.records import RunInfo, RunResult, Snapshot
from attnlab.outputs import plots

TOKENS = ["Your", " journey", " starts", " with", " one", " step"]
TITLE = "Attention weights during training"


def run_sink(tmp_path, steps: list[int], monkeypatch, stop_after: int | None = None, render: bool = False):
    """Feed FigureSink a run whose snapshots are at ``steps`` (all of them, or the first
    ``stop_after``); returns the evolution figure it made and the PNG path (rendered only with
    ``render``: the panels and title are what these tests check)."""
    drawn = []
    if not render:
        monkeypatch.setattr(plots, "figure_bytes", lambda fig, fmt="png": b"")
    real = plots.evolution_figure

    def spy(*args, **kwargs):
        drawn.append(real(*args, **kwargs))
        return drawn[-1]

    monkeypatch.setattr(plots, "evolution_figure", spy)
    rng = np.random.default_rng(0)
    sink = plots.FigureSink(tmp_path)
    sink.on_start(RunInfo(config={}, token_ids=list(range(6)), tokens=TOKENS, snapshot_steps=steps,
                          steps=steps[-1] + 1, focus_token=1))
    taken = steps[:stop_after]
    for k, step in enumerate(taken):
        sink.on_snapshot(Snapshot(step=step, loss=1.0 / (k + 1),
                                  weights=rng.dirichlet(np.ones(6), size=6)[None].astype(np.float32)))
    sink.on_end(RunResult(status="completed", steps_run=taken[-1] + 1, final_loss=0.1, wall_time_s=1.0,
                          losses=np.linspace(1.0, 0.1, taken[-1] + 1)))
    [fig] = drawn
    return fig, tmp_path / plots.FigureSink.EVOLUTION


def panel_steps(fig) -> list[int]:
    heatmaps = [ax for ax in fig.axes if ax.images and ax.get_label() != "<colorbar>"]
    return [int(ax.get_title().split("\n")[0].removeprefix("step=")) for ax in heatmaps]


def test_thirteen_snapshots_say_10_of_13(tmp_path, monkeypatch):
    steps = [0, 10, 20, 30, 40, 50, 60, 80, 100, 120, 150, 180, 200]
    fig, png = run_sink(tmp_path, steps, monkeypatch, render=True)
    assert fig._suptitle.get_text() == f"{TITLE}  (10 of 13 snapshots)"
    # np.linspace(0, 12, 10) rounded: indices 0 1 3 4 5 7 8 9 11 12
    assert panel_steps(fig) == [0, 10, 30, 40, 50, 80, 100, 120, 180, 200]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_ten_snapshots_have_no_note(tmp_path, monkeypatch):
    steps = list(range(0, 100, 10))
    fig, _ = run_sink(tmp_path, steps, monkeypatch)
    assert fig._suptitle.get_text() == TITLE
    assert panel_steps(fig) == steps


# planned 13 -> drawn steps {0 10 30 40 50 80 100 120 180 200}, chosen at the start; a run stopped after
# 7 snapshots (step 60) drew the 5 of them it reached plus its last one; after 12 (step 180), 9 of them
@pytest.mark.parametrize("stop_after, note", [(12, "(9 of 12 snapshots)"), (7, "(6 of 7 snapshots)"), (2, None)])
def test_a_run_that_stops_early_counts_the_snapshots_it_took(tmp_path, monkeypatch, stop_after, note):
    steps = [0, 10, 20, 30, 40, 50, 60, 80, 100, 120, 150, 180, 200]
    fig, _ = run_sink(tmp_path, steps, monkeypatch, stop_after=stop_after)
    title = fig._suptitle.get_text()
    assert title == (TITLE if note is None else f"{TITLE}  {note}")
    assert panel_steps(fig)[-1] == steps[stop_after - 1]  # the last snapshot taken is always drawn
