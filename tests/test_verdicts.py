"""Verdicts that hold (docs/reproduce.md): a run re-run on the kernels it recorded is compared bit
for bit, so an edit of 0.1 % of one loss, one attention weight or one summary value is "not
reproduced" for runs made with each kernel setting this machine can run (its own, AVX2, DEFAULT);
a run relabelled as made on kernels this CPU lacks is "within rounding" when it is one of the kernel
paths here, "not reproduced" for what no rounding changes (a token), else "undecided". Every file
attnlab wrote is compared (a GPT's ``layers`` and model.npz); unknown members are refused; a
reproduction stopped by Ctrl-C is "interrupted"."""
from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attnlab.commands import reproduce
from attnlab.core import interrupts
from attnlab.outputs import artifacts
from attnlab.saved import safe_read
from attnlab.saved.verdict import Difference, Rerun, decide

from conftest import ROOT, run_here

SMALL = ("logging=off", "train.steps=40", "train.snapshot_steps=[0,10,39]")
KINDS = ("here", "default", "avx2")  # this machine's kernels, then ATEN_CPU_CAPABILITY's values
FOREIGN = {"cpu_capability": "SVE256", "machine": "aarch64"}  # kernels and a machine this CPU lacks


def make(root: Path) -> dict[str, Path]:
    """The SMALL run made with each kernel setting (``here`` in this process, the others in a child)."""
    procs = {k: subprocess.Popen([sys.executable, "-m", "attnlab.commands.cli", f"hydra.run.dir={root / k}", *SMALL],
                                 cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                 env={**os.environ, "ATEN_CPU_CAPABILITY": k}) for k in KINDS[1:]}
    assert run_here(f"hydra.run.dir={root / 'here'}", *SMALL).returncode == 0
    for proc in procs.values():
        assert proc.wait(120) == 0, proc.stderr.read()
    return {k: root / k for k in KINDS}


def edit_loss(run: Path, step: int = 17, by: float = 1.001) -> None:
    lines = (run / "metrics.csv").read_text().splitlines()
    s, loss = lines[step + 1].split(",")
    assert int(s) == step
    lines[step + 1] = f"{step},{float(loss) * by!r}"
    (run / "metrics.csv").write_text("\n".join(lines) + "\n")


def edit_archive(run: Path, **change) -> None:
    arrays = safe_read.read_npz(run / "attention.npz", safe_read.ATTENTION_MEMBERS)
    for key, fn in change.items():
        arrays[key] = fn(arrays.get(key))
    np.savez(run / "attention.npz", **arrays)


def edit_summary(run: Path, **values) -> None:
    summary = safe_read.read_summary(run)
    for key, fn in values.items():
        summary[key] = fn(summary[key])
    (run / "summary.json").write_text(json.dumps(summary))


def relabel(run: Path) -> None:
    edit_summary(run, versions=lambda v: {**v, **FOREIGN})


def weight(w: np.ndarray) -> np.ndarray:
    w = w.copy()
    w[1, 0, 2, 3] *= np.float32(1.001)  # one attention weight of snapshot step 10, 0.1 %
    return w


EDITS = {"honest": lambda run: None, "loss": edit_loss, "weight": lambda run: edit_archive(run, weights=weight),
         "summary": lambda run: edit_summary(run, final_loss=lambda v: v * 1.001)}
EXPECTED = {"honest": ("reproduced exactly", ""), "loss": ("not reproduced", "loss"),
            "weight": ("not reproduced", "attention weights"), "summary": ("not reproduced", "final_loss")}


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    runs = make(tmp_path_factory.mktemp("kernels"))
    if safe_read.read_summary(runs["avx2"])["versions"]["cpu_capability"] != "AVX2":
        pytest.skip("this CPU has no AVX2 kernels (ATEN_CPU_CAPABILITY=avx2 is another CPU's setting here)")
    return runs


@pytest.fixture(scope="module")
def verdicts(made, tmp_path_factory) -> tuple[Path, dict[str, dict[str, str]], str]:
    """One ``attnlab-reproduce`` of a folder holding each kernel setting's run as made and with each edit,
    and the AVX2 run relabelled as made on an aarch64 machine with SVE256 kernels: as made, with a loss
    edited, with a token edited. (the folder, the CSV's rows by folder name, what was printed)."""
    root = tmp_path_factory.mktemp("verdicts")
    runs = root / "runs"
    for kind, run in made.items():
        for edit, fn in EDITS.items():
            fn(shutil.copytree(run, runs / f"{kind}-{edit}"))
    for edit, fn in (("honest", lambda run: None), ("loss", edit_loss),
                     ("token", lambda run: edit_archive(run, tokens=lambda t: np.array([t[0], " trip", *t[2:]])))):
        fn(shutil.copytree(made["avx2"], runs / f"arm-{edit}"))
        relabel(runs / f"arm-{edit}")
    import contextlib
    import io

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert reproduce.main([str(runs), "--out", str(root / "out"), "--csv", str(root / "v.csv"), "-j", "2"]) == 1
    with open(root / "v.csv", newline="", encoding="utf-8") as f:
        rows = {r["job"]: r for r in csv.DictReader(f)}
    return root, rows, printed.getvalue()


@pytest.mark.parametrize("kind", KINDS)
def test_runs_on_each_kernel_setting_are_compared_bit_for_bit(verdicts, made, kind):
    """The run as made reproduces exactly on its own kernels; every 0.1 % edit is not reproduced."""
    assert safe_read.read_summary(made[kind])["versions"]["cpu_capability"] == (
        kind.upper() if kind != "here" else artifacts.environment()["cpu_capability"])
    _root, rows, _printed = verdicts
    for edit, (verdict, differs) in EXPECTED.items():
        assert (rows[f"{kind}-{edit}"]["verdict"], rows[f"{kind}-{edit}"]["differs"]) == (verdict, differs), edit


def test_a_run_made_on_kernels_this_cpu_lacks(verdicts):
    """As made: it is one of the kernel paths here (within rounding); a token edited: not reproduced
    (no rounding changes a token); a loss edited: undecided, saying which kernels would decide."""
    _root, rows, printed = verdicts
    assert (rows["arm-honest"]["verdict"], rows["arm-honest"]["differs"]) == ("within rounding", "")
    assert rows["arm-token"]["verdict"] == "not reproduced" and rows["arm-token"]["differs"].startswith("tokens")
    assert rows["arm-loss"]["verdict"] == "undecided"
    assert rows["arm-loss"]["differs"].startswith("loss: made with SVE256 kernels, aarch64, torch ")
    assert "attnlab-reproduce on a machine with SVE256 kernels and torch " in rows["arm-loss"]["differs"]
    assert [line.split()[0] for line in printed.splitlines()[2:-2]] == sorted(rows)  # sorted by student (no names)


def test_one_run_says_what_differs_and_where(verdicts, capsys):
    """The single-run form of the same verdicts: the DEFAULT run's loss edit (re-run on DEFAULT kernels
    in a worker) names the quantity and the first step; the relabelled run names the kernel path."""
    root, _rows, _printed = verdicts
    assert reproduce.main([str(root / "runs" / "default-loss"), "--out", str(root / "one")]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "not reproduced: 1 quantity differs"
    assert out[2].split()[:2] == ["loss", "17"]
    assert reproduce.main([str(root / "runs" / "arm-honest"), "--out", str(root / "two")]) == 0
    header = capsys.readouterr().out.splitlines()[0]  # which kernel path here it is: this CPU's own, or AVX2
    assert header.startswith("reproduced within floating-point rounding: made with SVE256 kernels, aarch64, torch "
                             f"{artifacts.environment()['torch']}; identical with ") and header.endswith(" kernels here")


def test_decide():
    env = {"cpu_capability": "AVX2", "blas": "mkl", "torch": "2", "machine": "x86_64", "device": "cpu"}
    loss, token = Difference("loss", 3, 1e-9), Difference("tokens", note="['a'] vs ['b']")
    assert decide(env, [Rerun("o", "AVX2", env, "completed")]).key == "reproduced exactly"
    assert decide(env, [Rerun("o", "AVX2", env, "completed", [loss])]).key == "not reproduced"  # bit for bit
    story = Difference(".hydra/config.yaml", note="says seed=7")
    assert decide(env, [Rerun("o", "AVX2", env, "completed")], [story]).diffs == [story]
    other = {**env, "cpu_capability": "AVX512"}
    assert decide({**env, **FOREIGN}, [Rerun("o", "AVX512", other, "completed", [loss]),
                                       Rerun("o2", "DEFAULT", other, "completed")]).key == "within rounding"
    assert decide({**env, **FOREIGN}, [Rerun("o", "AVX512", other, "completed", [loss, token])]).diffs == [token, loss]
    assert decide({**env, **FOREIGN}, [Rerun("o", "AVX512", other, "completed", [loss])]).key == "undecided"
    assert decide({**env, "torch": "1"}, [Rerun("o", "AVX2", env, "completed", [loss])]).key == "undecided"
    assert decide(env, [Rerun("o", "AVX2", env, "interrupted")]).key == "interrupted"


# ----------------------------------------------------------------------------- every file attnlab wrote
GPT = ("logging=off", "model.n_layers=2", "train.objective=next_token", "model.d_model=8", "model.n_heads=2",
       "model.d_k=4", "model.d_v=4", "train.steps=6", "train.snapshot_steps=[0,5]", "analysis.max_new_tokens=1")


@pytest.fixture(scope="module")
def gpt_run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("gpt") / "run"
    proc = run_here(f"hydra.run.dir={run}", *GPT)
    assert proc.returncode == 0, proc.stderr
    return run


def test_a_gpts_every_block_and_its_model_are_compared(gpt_run, tmp_path, capsys):
    assert reproduce.main([str(gpt_run), "--out", str(tmp_path / "same")]) == 0
    assert capsys.readouterr().out.startswith("reproduced exactly")
    forged = shutil.copytree(gpt_run, tmp_path / "forged")  # block 0's weights (the views show the last block)
    edit_archive(forged, layers=lambda x: np.concatenate([x[:, :1] * np.float32(1.001), x[:, 1:]], axis=1))
    zeroed = shutil.copytree(gpt_run, tmp_path / "zeroed")
    with np.load(zeroed / "model.npz") as model:
        weights = dict(model)
    name = next(k for k in sorted(weights) if "block" in k or "layers" in k)
    weights[name] = np.zeros_like(weights[name])
    np.savez(zeroed / "model.npz", **weights)
    for run, quantity in ((forged, "attention weights (every block)"), (zeroed, f"model {name}")):
        assert reproduce.main([str(run), "--out", str(tmp_path / f"{run.name}-r")]) == 1
        out = capsys.readouterr().out.splitlines()
        assert out[0].startswith("not reproduced: ") and any(line.startswith(quantity + " ") for line in out), out


def test_members_attnlab_does_not_write_are_named_or_refused(made, tmp_path, capsys):
    """``layers`` injected into the tutorial's one-layer run: not reproduced (the reproduction has none);
    a member or a metrics.csv column attnlab never writes: refused, one line, nothing run."""
    injected = shutil.copytree(made["here"], tmp_path / "injected")
    edit_archive(injected, layers=lambda _none: safe_read.read_attention(made["here"])["weights"][:, None])
    assert reproduce.main([str(injected), "--out", str(tmp_path / "r1")]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[2].startswith("attention weights (every block)  -  "), out
    extra = shutil.copytree(made["here"], tmp_path / "extra")
    edit_archive(extra, notes=lambda _none: np.zeros(3))
    column = shutil.copytree(made["here"], tmp_path / "column")
    lines = (column / "metrics.csv").read_text().splitlines()
    (column / "metrics.csv").write_text("\n".join([lines[0] + ",grade", *(f"{ln},1" for ln in lines[1:])]) + "\n")
    for run, why in ((extra, "member notes.npy is not one attnlab writes"),
                     (column, "column grade is not one attnlab writes")):
        assert reproduce.main([str(run), "--out", str(tmp_path / f"{run.name}-r")]) == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and why in err, err
        assert not (tmp_path / f"{run.name}-r").exists()


def test_an_interrupted_reproduction_says_interrupted(made, tmp_path, capsys, monkeypatch):
    """Ctrl-C while the reproduction trains (in this process): "interrupted", exit 1 — not "not
    reproduced" — for one run and in a table, where the runs not verified say so too."""
    monkeypatch.setattr(interrupts, "pause_point",
                        lambda at: os.kill(os.getpid(), signal.SIGINT) if at == "first_snapshot" else None)
    assert reproduce.main([str(made["here"]), "--out", str(tmp_path / "one")]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "interrupted: the reproduction was stopped before its end (Ctrl-C or a signal): nothing decided"
    runs = tmp_path / "runs"
    for name in ("a", "b"):
        shutil.copytree(made["here"], runs / name)
    assert reproduce.main([str(runs), "--out", str(tmp_path / "many"), "-j", "1"]) == 1
    seen = capsys.readouterr()
    assert [line.split()[1] for line in seen.out.splitlines()[2:4]] == ["interrupted", "interrupted"]
    assert seen.out.splitlines()[-1] == f"2 runs: 2 interrupted; reproductions in {tmp_path / 'many'}"


def test_the_table_and_the_class_page_speak_the_teachers_language(verdicts):
    """The verdict table, its count line and the class page's verdict column in Chinese (lang=zh); the
    CSV keeps the English keys (they are data)."""
    from attnlab.core import i18n
    from attnlab.saved import report_data
    from attnlab.saved.verdict import read_verdicts

    root, rows, _printed = verdicts
    assert {r["verdict"] for r in rows.values()} == {"reproduced exactly", "not reproduced", "within rounding",
                                                     "undecided"}
    try:
        i18n.set_language("zh")
        table = reproduce.verdict_table([{"job": "s1", "name": "李雷", "verdict": "reproduced exactly", "differs": None},
                                         {"job": "s2", "name": "韩梅梅", "verdict": "undecided", "differs": "loss"}],
                                        Path("out")).splitlines()
        assert table[0].split() == ["任务", "名字", "结论", "不同之处"]
        assert table[2].split() == ["s1", "李雷", "完全复现", "-"] and table[3].split() == ["s2", "韩梅梅", "无法判定", "loss"]
        assert table[-1] == "2 个运行：1 个完全复现，1 个无法判定；复现结果在 out"
        records = report_data.collect_records([root / "runs"], verdicts=read_verdicts(root / "v.csv"))
        cells = {r["name"]: r["table"]["verdict"]["text"] for r in records}
        assert cells["here-honest"] == "完全复现" and cells["here-loss"] == "未复现: loss"
        assert cells["arm-honest"] == "舍入误差内一致" and cells["arm-loss"].startswith("无法判定: loss: ")
    finally:
        i18n.set_language("en")


def test_reproductions_draw_only_on_request(tmp_path, capsys):
    """A run that drew its figures: its reproduction writes only what the verdict compares, unless
    ``--artifacts`` asks for the figures too (the verdict is the same)."""
    run = tmp_path / "run"
    assert run_here(f"hydra.run.dir={run}", "train.steps=5", "train.snapshot_steps=[0,4]", "logging.tensorboard=false",
                    "logging.report=false").returncode == 0
    assert (run / "loss.png").is_file()
    for args, drawn in (([], False), (["--artifacts"], True)):
        out = tmp_path / f"r{len(args)}"
        assert reproduce.main([str(run), "--out", str(out), *args]) == 0
        assert capsys.readouterr().out.startswith("reproduced exactly")
        assert sorted(p.name for p in out.iterdir() if p.suffix == ".png") == (
            ["attention_evolution.png", "loss.png"] if drawn else [])
