"""``import attnlab``: the notebook API (train, walkthrough, sweep, exercise, check, compose,
use_chinese_font) and what a notebook shows of its results (IPython's display protocol), in-process."""
import base64
import html
import io
import json
import os
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest
from test_check import TUTORIAL

import attnlab
from attnlab.core import i18n
from attnlab.core.errors import AttnlabError
from attnlab.saved.table import header

from conftest import GOLDEN_SECTION5


@pytest.fixture(autouse=True)
def english_afterwards():
    yield
    i18n.set_language("en")  # lang="zh" is the session's language from then on: not for the next test


def test_import_attnlab_is_cheap_and_names_the_api():
    code = ("import sys, attnlab; heavy = [m for m in ('torch', 'hydra', 'matplotlib', 'IPython') if m in sys.modules];"
            "print(heavy, sorted(n for n in dir(attnlab) if not n.startswith('_')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ("[] ['Run', 'SweepTable', 'check', 'compose', 'exercise', 'sweep', 'train', "
                           "'use_chinese_font', 'walkthrough']")
    from attnlab.commands import api

    assert attnlab.train is api.train and attnlab.compose is api.compose


def test_train_prints_the_commands_lines_and_writes_nothing(tmp_path, monkeypatch, capsys, attnlab_here):
    monkeypatch.chdir(tmp_path)
    cli = attnlab_here("lang=zh", "logging=off", cwd=tmp_path)
    made = sorted(os.listdir(tmp_path))
    run = attnlab.train(lang="zh")
    printed = capsys.readouterr().out.splitlines()
    assert sorted(os.listdir(tmp_path)) == made  # nothing written by the API
    lines = [line for line in cli.stdout.splitlines() if line.startswith("step")]
    assert [int(line.split()[1]) for line in lines] == list(GOLDEN_SECTION5)
    assert "journey关注: 'Your'=0.99" in lines[-1]
    assert printed[:5] == lines  # the tutorial's five lines, in Chinese, as `attnlab lang=zh` prints them
    assert re.fullmatch(r"完成: 201 步，最终 loss 4\.\d+e-06，[\d.]+ 秒", printed[5])
    assert len(printed) == 6
    assert run.losses.shape == (201,) and [s.step for s in run.snapshots] == list(GOLDEN_SECTION5)


def test_a_run_shows_its_figure_its_report_in_a_sandboxed_frame_and_a_few_lines(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = attnlab.train("logging.console=false")
    bundle = run._repr_mimebundle_()
    assert os.listdir(tmp_path) == []
    text = bundle["text/plain"].splitlines()
    assert len(text) == 3 and text[0].startswith("attnlab run: completed, 201 steps, final loss 4.9")
    assert text[1] == "  ' journey' attends most to 'Your' (0.99) at step 200"
    assert base64.b64decode(bundle["image/png"])[:8] == b"\x89PNG\r\n\x1a\n"
    page = bundle["text/html"]
    frames = re.findall(r'<iframe srcdoc="([^"]*)" sandbox="allow-scripts"', page)
    assert len(frames) == 1
    outside = page.replace(frames[0], "")
    assert "<style" not in outside and "<script" not in outside  # nothing of the page reaches the notebook
    inner = html.unescape(frames[0])
    assert inner == run.page() and inner.lower().startswith("<!doctype html>")
    data = json.loads(re.search(r'<script type="application/json" id="attnlab-data">(.*?)</script>', inner, re.S)
                      .group(1))
    (rec,) = data["runs"]
    assert rec["steps"] == list(GOLDEN_SECTION5) and rec["tokens"][1] == " journey"
    assert rec["focus"]["target"] == "Your" and round(rec["focus"]["weight"], 2) == 0.99


def test_save_writes_the_run_dir_the_command_writes(tmp_path):
    from attnlab.saved.runs import collect_rows

    run = attnlab.train("train.steps=30", "logging.console=false")
    out = run.save(tmp_path / "mine")
    assert sorted(os.listdir(out)) == ["attention.npz", "attention_evolution.png", "loss.png", "metrics.csv",
                                       "report.html", "summary.json"]
    (row,) = collect_rows([out])
    assert row["status"] == "completed" and row["steps_run"] == 30
    assert row["final_loss"] == run.final_loss and row["focus_target"] == "Your"
    with pytest.raises(AttnlabError, match="dir="):
        run.save(out)  # holds a run: refused, kept
    assert run.report(tmp_path / "r.html").read_text(encoding="utf-8") == run.page()
    assert run.report(tmp_path / "r.html").read_text(encoding="utf-8") == run.page()  # its own page: replaced
    (tmp_path / "notes.html").write_text("my notes")
    with pytest.raises(AttnlabError, match="notes.html: exists and attnlab did not write it"):
        run.report(tmp_path / "notes.html")
    assert (tmp_path / "notes.html").read_text() == "my notes"


def test_keyword_overrides_and_strings_compose_the_same_config():
    assert attnlab.compose("model.d_model=16", "optimizer=sgd", "train.snapshot_steps=[0,5]", "sentence=你好 世界") == \
        attnlab.compose(model__d_model=16, optimizer="sgd", train__snapshot_steps=[0, 5], sentence="你好 世界")
    assert attnlab.compose(logging__figures=False).logging.figures is False
    with pytest.raises(AttnlabError, match=r"^model\.d_mdl=3: no such config key"):
        attnlab.train(model__d_mdl=3)
    with pytest.raises(AttnlabError, match="an override is a string"):
        attnlab.train(16)


@pytest.mark.parametrize("call, how", [
    (lambda: attnlab.train(attnlab.compose("experiment=exercise4")), "attnlab.exercise(4)"),
    (lambda: attnlab.train("experiment=heads"), "attnlab.sweep('experiment=heads')"),
    (lambda: attnlab.walkthrough("experiment=exercise1"), "attnlab.exercise(1)"),
    (lambda: attnlab.walkthrough(attnlab.compose("experiment=exercise3", "seed=1")), "attnlab.exercise(3)"),
])
def test_a_preset_that_describes_a_sweep_is_refused_by_one_run_in_one_line(call, how, capsys):
    with pytest.raises(AttnlabError) as err:
        call()
    assert "\n" not in str(err.value) and "describes a sweep of" in str(err.value) and how in str(err.value)
    assert capsys.readouterr().out == ""  # nothing ran


def test_train_refuses_a_walkthrough_and_shows_a_bar_in_a_notebook(monkeypatch, capsys):
    from attnlab.commands import api

    with pytest.raises(AttnlabError, match=r"^task=walkthrough: .* attnlab\.walkthrough"):
        attnlab.train("experiment=tutorial_walkthrough")
    monkeypatch.setattr(api, "_in_notebook", lambda: True)  # a cell's output is no terminal: the bar shows all the same
    run = attnlab.train(train__steps=1000, train__snapshot_steps=[0, 999])
    err = capsys.readouterr().err
    assert run.steps_run == 1000 and re.search(r"\b\d+/1000 \[", err)  # tqdm's bar (leave=False: its last state varies)


def test_exercise4_runs_the_presets_six_jobs_and_returns_their_table(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    table = attnlab.exercise(4)
    assert os.listdir(tmp_path) == []
    printed = capsys.readouterr().out
    assert printed.count("\ncompleted: ") + printed.startswith("completed: ") == 6
    assert "#5 : optimizer.lr=0.5 train.steps=120 experiment=exercise4" in printed
    rows = {(r["job"].split("_", 1)[1]): r for r in table.rows}
    assert list(rows) == [f"optimizer.lr={lr},train.steps={n}" for lr in ("0.005", "0.05", "0.5") for n in (30, 120)]
    # the README's numbers (seed 42)
    mid = rows["optimizer.lr=0.05,train.steps=120"]
    assert (mid["focus_step"], mid["steps_to_threshold"], mid["focus_target"]) == (60, 94, "Your")
    fast = rows["optimizer.lr=0.5,train.steps=120"]
    assert fast["focus_step"] == 10 and fast["focus_target"] == " starts" and fast["final_loss"] > 1
    slow = rows["optimizer.lr=0.005,train.steps=120"]
    assert slow["focus_step"] is None and round(slow["focus_weight"], 2) == 0.85
    assert "path" not in mid  # the jobs' temporary folder is gone
    text = repr(table).splitlines()
    assert text[0].split()[:2] == ["job", "status"] and len(text) >= 8
    assert table.answer and table.answer in repr(table) and "60" in table.answer  # the exercise's answer
    page = table._repr_html_()
    assert page.count("<tr>") == 7 and html.escape(header("focus_step")) in page


def test_exercise5_answers_without_positions_the_orders_are_the_same_rows(capsys):
    table = attnlab.exercise(5, lang="zh")
    learned, none = table.rows
    assert learned["perm_tokens_match"] is True and learned["perm_z_max_abs_diff"] > 0.1
    assert none["perm_z_max_abs_diff"] < 1e-6
    assert "== 1. 分词（Tokenization）==" in capsys.readouterr().out


def test_a_sweep_kept_in_a_folder_is_the_commands(tmp_path, capsys):
    table = attnlab.sweep("optimizer.lr=0.01,0.1", train__steps=20, logging="off", dir=tmp_path / "sw")
    assert [r["job"] for r in table.rows] == ["0_optimizer.lr=0.01", "1_optimizer.lr=0.1"]
    assert (tmp_path / "sw" / "summary.csv").is_file() and table.dir == tmp_path / "sw"
    with pytest.raises(AttnlabError, match="no sweep"):
        attnlab.sweep("optimizer.lr=0.01")


def test_check_names_a_cell_functions_mistake_in_chinese(capsys):
    namespace: dict = {}
    exec(TUTORIAL, namespace)  # as if typed into notebook cells
    attnlab.compose(lang="zh")
    assert attnlab.check(namespace) is True
    assert capsys.readouterr().out.splitlines()[-1] == "全部 6 个阶段都与教程的数字一致"
    exec(TUTORIAL.replace("attn_scores / d_k ** 0.5", "attn_scores"), namespace)
    assert attnlab.check(namespace["embed_tokens"], namespace["add_positions"], namespace["project_qkv"],
                         namespace["attention_scores"], namespace["attention_weights"],
                         context_vectors=namespace["context_vectors"]) is False
    out = capsys.readouterr().out
    assert "没有用 √d_k 缩放：要把 Q @ K.T 除以 d_k ** 0.5" in out and "阶段 4/6" in out


def test_use_chinese_font_draws_a_chinese_title_without_a_missing_glyph():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    saved = dict(matplotlib.rcParams)
    try:
        name = attnlab.use_chinese_font()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fig, ax = plt.subplots()
            ax.set_title("注意力权重的变化")
            ax.plot(np.arange(3), -np.arange(3))
            fig.savefig(io.BytesIO(), format="png")
            plt.close(fig)
        assert [str(w.message) for w in caught if "missing from" in str(w.message)] == []
        assert name in matplotlib.rcParams["font.sans-serif"]
    finally:
        matplotlib.rcParams.update(saved)


@pytest.mark.parametrize("overrides", [
    ("experiment=exercise2", "sentence=你好 世界, 朋友"),  # a free text's comma sweeps; the preset's values replaced
    ("optimizer.lr=0.01,0.1", "sentence=Hello world", "train.steps=5", "logging=off", "seed=3"),
])
def test_a_sweep_in_python_has_the_commands_jobs_and_rows(overrides, tmp_path, attnlab_here, capsys):
    from attnlab.saved.runs import collect_rows

    proc = attnlab_here("-m", *overrides, f"hydra.sweep.dir={tmp_path / 'cli'}", "logging.console=false")
    assert proc.returncode == 0, proc.stderr
    table = attnlab.sweep(*overrides, "logging.console=false")
    keys = ("job", "status", "n_tokens", "tokens", "final_loss", "focus_target", "focus_weight")
    assert [{k: r.get(k) for k in keys} for r in table.rows] == \
        [{k: r.get(k) for k in keys} for r in collect_rows([tmp_path / "cli"])]
