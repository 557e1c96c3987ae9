"""`attnlab-compare --plot`: titles and legend name each run by its swept values with short key
names, and the layout keeps every text inside the figure and clear of the others (2-job and
6-job sweeps, long Chinese/emoji sentences). Also attnlab.saved.swept on its own."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import matplotlib
import pytest
import yaml
from omegaconf import OmegaConf

from attnlab.commands import compare
from attnlab.commands.job import run_job
from attnlab.outputs.fonts import drawable
from attnlab.saved import compare_figure, swept

from conftest import compose_cfg

QUIET = ["logging=off", "logging.console=false", "train.snapshot_steps=[0,29]"]


def make_sweep(root: Path, jobs: list[list[str]]) -> Path:
    """A sweep folder of real runs (run_job, as the CLI runs them) named as Hydra names them,
    each with the .hydra/config.yaml and overrides.yaml Hydra would write."""
    for num, overrides in enumerate(jobs):
        run_dir = root / f"{num}_{','.join(sorted(overrides))}"
        cfg = compose_cfg(*overrides, *QUIET)
        assert run_job(cfg, run_dir).status == "completed"
        (run_dir / ".hydra").mkdir()
        OmegaConf.save(cfg, run_dir / ".hydra" / "config.yaml")
        (run_dir / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides + QUIET, allow_unicode=True),
                                                           encoding="utf-8")
        summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
        summary["overrides"] = overrides + QUIET  # what the CLI records
        (run_dir / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def ex4(tmp_path_factory) -> Path:
    """Exercise 4's grid: lr 0.005, 0.05, 0.5 x 30, 60 steps (60 instead of 120, same shape)."""
    jobs = [[f"optimizer.lr={lr}", f"train.steps={steps}"] for lr in ("0.005", "0.05", "0.5") for steps in (30, 60)]
    return make_sweep(tmp_path_factory.mktemp("ex4") / "sweep", jobs)


def draw(paths: list[Path], out: Path, monkeypatch):
    """Run ``attnlab-compare PATHS --plot OUT`` and return the figure it saved, drawn."""
    figs = []
    real = compare_figure.figure_bytes

    def spy(fig, fmt):
        figs.append(fig)
        return real(fig, fmt)

    monkeypatch.setattr(compare_figure, "figure_bytes", spy)
    assert compare.main([*map(str, paths), "--plot", str(out)]) == 0
    [fig] = figs
    return fig


def heatmaps(fig):
    return [a for a in fig.axes if a.images and a.get_label() != "<colorbar>"]


def drawn_texts(ax) -> list:
    """The texts drawn for ``ax`` outside its image: titles, axis labels, the tick labels inside
    the view (matplotlib keeps labels for ticks just outside it, not drawn), legend entries; only
    the title of an axes switched off."""
    texts = [t for t in (ax.title, ax._left_title, ax._right_title) if t.get_text()]
    if ax.get_legend():
        texts += ax.get_legend().get_texts()
    if not ax.axison:  # the key and heading rows: axes switched off but for their legend and title
        return texts
    texts += [t for t in (ax.xaxis.label, ax.yaxis.label) if t.get_text()]
    for axis, i in ((ax.xaxis, 0), (ax.yaxis, 1)):
        lo, hi = sorted(axis.get_view_interval())
        texts += [t for t in axis.get_ticklabels() if t.get_text() and lo <= t.get_position()[i] <= hi]
    return [t for t in texts if t.get_visible()]


def assert_nothing_clipped_or_overlapping(fig):
    """Every drawn artist inside the figure; no text of one axes (the loss plot, the heading,
    each heatmap, the colour bar) overlaps a text of another, and no title overlaps its own
    axes' tick labels."""
    renderer = fig.canvas.get_renderer()
    w, h = fig.get_size_inches()
    tight = fig.get_tightbbox(renderer)  # inches, drawn artists only
    assert tight.x0 >= 0 and tight.y0 >= 0 and tight.x1 <= w and tight.y1 <= h, (tight, w, h)
    groups = [[(t.get_text(), t.get_window_extent(renderer)) for t in drawn_texts(ax)] for ax in fig.axes]
    assert any("attention at the last snapshot" in text for g in groups for text, _ in g)  # the heading
    assert sum(1 for g in groups if g) >= len(heatmaps(fig)) + 3  # loss, heading, heatmaps, colour bar
    for i, group in enumerate(groups):
        for other in groups[i + 1:]:
            for text_a, a in group:
                for text_b, b in other:
                    assert not a.overlaps(b), f"{text_a!r} overlaps {text_b!r}"
    for ax, group in zip(fig.axes, groups):
        title = ax.title.get_window_extent(renderer)
        for text, box in group:
            if text != ax.get_title() and ax.get_title():
                assert not title.overlaps(box), f"title {ax.get_title()!r} overlaps {text!r}"


def test_six_jobs_titles_show_the_swept_values(ex4, tmp_path, monkeypatch):
    fig = draw([ex4], tmp_path / "ex4.png", monkeypatch)
    values = [f"lr={lr} steps={steps}" for lr in ("0.005", "0.05", "0.5") for steps in (30, 60)]
    assert [a.get_title() for a in heatmaps(fig)] == [f"{n}: {v}\nstep=29" for n, v in enumerate(values)]
    assert [t.get_text() for t in key(fig).get_texts()] == [f"{n}: {v}" for n, v in enumerate(values)]
    assert key(fig)._ncols == 6  # one row of 6 names
    # 6 heatmaps in rows of 4: 14.5 in wide; 4.6 in (loss, heading) + the key's row + 2 rows of 3.5 + 2 title lines
    assert tuple(fig.get_size_inches()) == pytest.approx((3.4 * 4 + 0.9, 4.6 + 0.25 + 2 * (3.5 + 0.17 * 2)))
    png = (tmp_path / "ex4.png").read_bytes()
    assert (int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")) == (1450, 1253)
    assert_nothing_clipped_or_overlapping(fig)


def test_two_jobs(ex4, tmp_path, monkeypatch):
    two = sorted(p for p in ex4.iterdir() if p.name[0] in "23")  # lr 0.05, 30 and 60 steps: only steps differs
    fig = draw(two, tmp_path / "two.png", monkeypatch)
    assert [a.get_title() for a in heatmaps(fig)] == ["2: steps=30\nstep=29", "3: steps=60\nstep=29"]
    assert tuple(fig.get_size_inches()) == pytest.approx((9.0, 4.6 + 0.25 + 3.5 + 0.17 * 2))
    assert_nothing_clipped_or_overlapping(fig)


def test_long_chinese_and_emoji_sentences_wrap_and_fit(tmp_path, monkeypatch):
    sentences = ['"Your journey starts with one step"', '"你的旅程从一步开始"',
                 '"One small step 🚶 at a time, then another, and another"']
    sweep = make_sweep(tmp_path / "sent", [[f"sentence={s}", "train.steps=30", "train.focus_token=0"]
                                           for s in sentences])
    fig = draw([sweep], tmp_path / "sent.png", monkeypatch)
    titles = [a.get_title() for a in heatmaps(fig)]
    assert titles[0] == '0: sentence="Your journey starts\nwith one step"\nstep=29'
    # every line at most 34 characters as drawn (without a CJK or emoji font they are escaped,
    # \u4f60, and wrapped between characters); the whole sentence is there
    for title, sentence in zip(titles, sentences):
        assert all(len(line) <= 34 for line in title.splitlines()), title
        assert drawable(sentence) in title.replace("\n", " ") or drawable(sentence) in title.replace("\n", "")
    if drawable("你") == "你":
        assert titles[1] == '1: sentence="你的旅程从一步开始"\nstep=29'
    else:
        # 'sentence="' (10) + 4 escapes of 6 characters = 34: the fifth character starts line 3
        assert titles[1] == ('1:\nsentence="\\u4f60\\u7684\\u65c5\\u7a0b\n'
                             '\\u4ece\\u4e00\\u6b65\\u5f00\\u59cb"\nstep=29')
    assert_nothing_clipped_or_overlapping(fig)


# ------------------------------------------------------------------------------ attnlab.saved.swept
def test_swept_keys_are_those_that_differ():
    runs_ = [["optimizer.lr=0.005", "train.steps=30", "experiment=exercise4"],
             ["optimizer.lr=0.05", "train.steps=30", "experiment=exercise4"],
             ["optimizer.lr=0.05", "experiment=exercise4", "+model.d_k=8"]]
    assert swept.swept(runs_) == [{"optimizer.lr": "0.005", "train.steps": "30"},
                                  {"optimizer.lr": "0.05", "train.steps": "30"},
                                  {"optimizer.lr": "0.05", "model.d_k": "8"}]
    assert swept.swept([["seed=1", "logging=off"]]) == [{"seed": "1", "logging": "off"}]  # one run: all
    assert swept.swept([["seed=1"], ["seed=1"]]) == [{}, {}]


def test_short_keys_keep_what_tells_them_apart():
    assert swept.short_keys(["optimizer.lr", "train.steps", "optimizer"]) == \
        {"optimizer.lr": "lr", "train.steps": "steps", "optimizer": "optimizer"}
    assert swept.short_keys(["optimizer.weight_decay", "model.weight_decay", "model.d_model"]) == \
        {"optimizer.weight_decay": "optimizer.weight_decay", "model.weight_decay": "model.weight_decay",
         "model.d_model": "d_model"}
    assert swept.short_keys(["a.x.y", "b.x.y", "c.z"]) == {"a.x.y": "a.x.y", "b.x.y": "b.x.y", "c.z": "z"}


def test_run_labels_are_the_rows_swept_values():
    assert swept.run_labels([{"job": "0_a", "override_list": ["a=" + "z" * 70]}]) == ["0: a=" + "z" * 59 + "…"]
    rows = [{"job": "0_seed=1", "override_list": ["seed=1", "sentence=a b"]},
            {"job": "1_seed=2", "override_list": ["seed=2", "sentence=a b"]}, {"job": "elsewhere"}]
    assert swept.run_labels(rows) == ["0: seed=1 sentence=a b", "1: seed=2 sentence=a b", "elsewhere"]  # no sentence set


def key(fig):
    [legend] = [a.get_legend() for a in fig.axes if a.get_legend()]
    return legend


def copies(ex4: Path, root: Path, n: int) -> list[Path]:
    return [ex4] + [shutil.copytree(ex4, root / f"again{i}") for i in range(1, n)]


def test_thirty_runs_keyed_below_the_axes_in_columns(ex4, tmp_path, monkeypatch):
    """30 runs (5 copies of a 6-job sweep): every run a (colour, line style) of its own, the same in
    both axes and the key; the key in columns below the curves, covering none of them."""
    fig = draw(copies(ex4, tmp_path, 5), tmp_path / "thirty.png", monkeypatch)
    loss, focus = fig.axes[:2]
    styles = [(line.get_color(), line.get_linestyle()) for line in loss.get_lines()]
    assert len(styles) == 30 and len(set(styles)) == 30
    assert styles[10] == (styles[0][0], "--") and styles[0][1] == "-"
    assert [(line.get_color(), line.get_linestyle()) for line in focus.get_lines()][:30] == styles
    legend = key(fig)
    assert [(h.get_color(), h.get_linestyle()) for h in legend.legend_handles] == styles
    assert len(legend.get_texts()) == 30 and legend._ncols > 1  # as many columns as the names' width allows
    renderer = fig.canvas.get_renderer()
    box = legend.get_window_extent(renderer)
    assert box.y1 < min(a.get_window_extent(renderer).y0 for a in (loss, focus))  # below both axes
    assert_nothing_clipped_or_overlapping(fig)


def test_more_runs_than_styles_are_coloured_by_row(ex4, tmp_path, monkeypatch):
    """42 runs: no key (the 40 styles would repeat), a colour scale over the rows, 42 colours."""
    fig = draw(copies(ex4, tmp_path, 7), tmp_path / "many.png", monkeypatch)
    assert not [a for a in fig.axes if a.get_legend()]
    colors = [line.get_color() for line in fig.axes[0].get_lines()]
    assert len(colors) == 42 and len(set(colors)) == 42
    assert colors == [s["color"] for s in compare_figure.curve_styles(42)]
    labels = [a.get_ylabel() for a in fig.axes if a.get_label() == "<colorbar>"]
    assert labels == ["run: its row in the table (0 to 41)", "attention weight"]
    assert_nothing_clipped_or_overlapping(fig)


def test_forty_styles_are_distinct_and_the_reports():
    styles = compare_figure.curve_styles(40)
    assert len({tuple(sorted(s.items())) for s in styles}) == 40
    template = (Path(compare_figure.__file__).with_name("report_template.html")).read_text(encoding="utf-8")
    palette = json.loads(re.search(r"const PALETTE = (\[.*?\]);", template).group(1))
    dashes = json.loads(re.search(r"const DASHES = (\[.*?\]);", template).group(1))
    assert [s["color"] for s in styles[:10]] == palette  # matplotlib's default cycle, in the report too
    assert palette == [matplotlib.colors.to_hex(c) for c in matplotlib.rcParamsDefault["axes.prop_cycle"].by_key()["color"]]
    # the report's dashes are matplotlib's for "--", ":", "-." at its 1.8 px lines (lines.scale_dashes)
    patterns = [matplotlib.rcParamsDefault[f"lines.{k}_pattern"] for k in ("dashed", "dotted", "dashdot")]
    assert dashes == [""] + [" ".join(f"{round(v * 1.8, 1):g}" for v in p) for p in patterns]
