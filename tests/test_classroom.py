"""The classroom (docs/classroom.md): a teacher's preset folder (``--config-dir DIR experiment=NAME``),
30 named runs collected into one folder (28 as handed out, one with another learning rate, one
made with torch's portable kernels as on another CPU), one tampered; ``attnlab-reproduce`` over
the folder, ``attnlab-compare --against`` the preset, the report's differs; name and notes
checked like free text; sweep job folders named by the keys that vary."""
from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from report_helpers import page_data

from attnlab.commands import compare, reproduce
from attnlab.commands import report as report_command
from attnlab.commands.sweep import job_dirname
from attnlab.core import checks
from attnlab.core.errors import ConfigError
from attnlab.saved import report, report_data

from conftest import ROOT, compose_cfg, run_here

PRESET = """# @package _global_
# the class's assignment: 20 steps, three snapshots, no figures
defaults:
  - override /logging: "off"
train:
  steps: 20
  snapshot_steps: [0, 10, 19]
"""
NAMES = [f"s{i:02d}" for i in range(1, 31)]


@pytest.fixture(scope="module")
def classroom(tmp_path_factory) -> dict[str, Path]:
    """``class/experiment/week.yaml``; ``collected/sNN`` the 30 students' run folders; ``end`` the
    end line of s07's run (default run folder, in ``work``)."""
    root = tmp_path_factory.mktemp("classroom")
    preset = root / "class" / "experiment" / "week.yaml"
    preset.parent.mkdir(parents=True)
    preset.write_text(PRESET, encoding="utf-8")
    given = ("--config-dir", str(root / "class"), "experiment=week")
    other = subprocess.Popen(  # made with torch's portable kernels, beside the runs below
        [sys.executable, "-m", "attnlab.commands.cli", *given, "name=s30", f"hydra.run.dir={root}/other"], cwd=ROOT,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "ATEN_CPU_CAPABILITY": "default"})
    sweep = run_here("-m", *given, "name=" + ",".join(n for n in NAMES if n not in ("s07", "s30")),
                     f"hydra.sweep.dir={root}/sweep")
    assert sweep.returncode == 0, sweep.stderr
    work = root / "work"
    work.mkdir()
    own = run_here(*given, "name=s07", "optimizer.lr=0.5", cwd=work)
    assert own.returncode == 0, own.stderr
    assert other.wait(120) == 0, other.stderr.read()
    collected = root / "collected"
    jobs = sorted((root / "sweep").glob("*_name=*"), key=lambda p: int(p.name.split("_")[0]))
    for job in [*jobs, *(work / "outputs").glob("*/*"), root / "other"]:
        name = json.loads((job / "summary.json").read_text(encoding="utf-8"))["config"]["name"]
        shutil.copytree(job, collected / name)
    tampered = collected / "s13" / "metrics.csv"
    lines = tampered.read_text(encoding="utf-8").splitlines()
    lines[5] = lines[5].split(",")[0] + ",0.5"
    tampered.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {"root": root, "preset": preset, "sweep": root / "sweep", "collected": collected,
            "own": next((work / "outputs").glob("*/*")), "end": own.stdout.strip().splitlines()[-1]}


def test_a_named_run_is_in_its_folder_name_and_end_line(classroom):
    folder = classroom["own"]
    assert folder.name.endswith("_s07") and len(folder.name) == len("10-00-00.123456_s07")
    assert classroom["end"].startswith("completed (s07): 20 steps, final loss ")
    assert classroom["end"].endswith(f"{folder.parent.name}/{folder.name}")
    assert job_dirname("10-00-00.1", "Zoë O'Neil/2 \x1b") == "10-00-00.1_Zoë_ONeil_2__"


def test_sweep_job_folders_name_only_the_keys_that_vary(classroom, tmp_path):
    """experiment=week and the preset's keys are the same in every job: left out of the names."""
    names = sorted((p.name for p in classroom["sweep"].glob("*_*")), key=lambda n: int(n.split("_")[0]))
    assert names == [f"{i}_name={n}" for i, n in enumerate(n for n in NAMES if n not in ("s07", "s30"))]
    proc = run_here("-m", "seed=1,2", "train.snapshot_steps=[0,2]", "train.steps=3", "logging=off",
                    "name=bob", f"hydra.sweep.dir={tmp_path}/sw")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in (tmp_path / "sw").iterdir() if p.is_dir()) == ["0_seed=1", "1_seed=2"]
    overrides = json.loads((tmp_path / "sw" / "0_seed=1" / "summary.json").read_text())["overrides"]
    assert overrides == ["seed=1", "train.snapshot_steps=[0,2]", "train.steps=3", "logging=off", "name=bob"]


def test_one_command_verifies_the_class(classroom, tmp_path, capsys):
    collected, out, page = classroom["collected"], tmp_path / "repro", tmp_path / "class.html"
    assert reproduce.main([str(collected), "--out", str(out), "--csv", str(tmp_path / "v.csv"), "--report", str(page),
                           "--against", str(classroom["preset"])]) == 1
    printed = capsys.readouterr().out.splitlines()[:-1]  # the page's line last
    with open(tmp_path / "v.csv", newline="", encoding="utf-8") as f:
        rows = {r["name"]: r for r in csv.DictReader(f)}
    assert sorted(rows) == NAMES and len(printed) == 2 + 30 + 2
    expected = {n: ("not reproduced", "loss") if n == "s13" else ("reproduced exactly", "") for n in NAMES}
    assert {n: (r["verdict"], r["differs"]) for n, r in rows.items()} == expected  # s30 on its DEFAULT kernels
    assert list(rows) == NAMES  # sorted by student
    assert all(r["reproduction"] == str(out / n) for n, r in rows.items())
    assert printed[-2] == f"30 runs: 29 reproduced exactly, 1 not reproduced; reproductions in {out}"
    assert json.loads((out / "s07" / "summary.json").read_text())["config"]["name"] == "s07"  # as recorded
    # the class at a glance: each student's verdict and what they changed from the assignment, by student
    runs = page_data(page)["runs"]
    assert [r["table"]["name"]["text"] for r in runs] == NAMES
    shown = {r["table"]["name"]["text"]: (r["table"]["verdict"]["text"], r["table"].get("differs", {}).get("text"))
             for r in runs}
    assert shown == {n: ("not reproduced: loss" if n == "s13" else "reproduced exactly",
                         "optimizer.lr=0.5" if n == "s07" else "-") for n in NAMES}
    again = tmp_path / "again.html"  # attnlab-report from the verdict table: the same view
    assert report_command.main([str(collected), "--verdicts", str(tmp_path / "v.csv"), "--against",
                                str(classroom["preset"]), "-o", str(again)]) == 0
    assert [(r["table"]["name"]["text"], r["table"]["verdict"]["text"], r["table"].get("differs", {}).get("text"))
            for r in page_data(again)["runs"]] == [(n, *shown[n]) for n in NAMES]
    assert page_data(page)["table_columns"][:3] == [{"key": "job", "title": "job", "right": False},
                                                   {"key": "name", "title": "name", "right": False},
                                                   {"key": "verdict", "title": "verdict", "right": False}]
    assert reproduce.main([str(tmp_path / "nothing-here")]) == 2


def test_compare_shows_what_each_student_changed(classroom, tmp_path, capsys):
    collected, preset = classroom["collected"], classroom["preset"]
    assert compare.main([str(collected), "--against", str(preset), "--csv", str(tmp_path / "c.csv")]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[-2] == f"1 of 30 runs differ from {preset}"
    with open(tmp_path / "c.csv", newline="", encoding="utf-8") as f:
        rows = {r["name"]: r["differs"] for r in csv.DictReader(f)}
    assert rows == {n: "optimizer.lr=0.5" if n == "s07" else "" for n in NAMES}
    line = next(x for x in printed if x.startswith("s07 "))
    assert line.split()[1:3] == ["s07", "optimizer.lr=0.5"]
    # against the others: the value most runs share; against another preset: each key it sets otherwise
    assert compare.main([str(collected), "--csv", str(tmp_path / "d.csv")]) == 0
    with open(tmp_path / "d.csv", newline="", encoding="utf-8") as f:
        assert {r["name"]: r["differs"] for r in csv.DictReader(f)} == rows
    other = tmp_path / "other.yaml"
    other.write_text("# @package _global_\ntrain:\n  steps: 20\n  snapshot_steps: [0, 10, 19]\nseed: 7\n")
    assert compare.main([str(collected / "s01"), str(collected / "s07"), "--against", str(other)]) == 0
    shown = capsys.readouterr().out
    # logging=off in the runs, not in that preset: what a run writes is never what differs
    last = [line.split() for line in shown.splitlines() if line.startswith(("s01 ", "s07 "))][-2:]
    assert [r[2:4] for r in last] == [["seed=42", "completed"], ["seed=42", "optimizer.lr=0.5"]]
    assert "logging." not in shown


@pytest.mark.parametrize("text, key", [("defaults:\n  - override /launcher: x\n", "defaults"),
                                       ("model:\n  d_modl: 3\n", "model.d_modl"), ("- 1\n", None)])
def test_a_preset_that_is_not_attnlabs_is_one_line(tmp_path, capsys, text, key):
    preset = tmp_path / "p.yaml"
    preset.write_text(text)
    assert compare.main([str(ROOT / "tests"), "--against", str(preset)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and (key is None or f"{key}=" in err), err


def test_the_report_shows_what_differs(classroom):
    records = report_data.collect_records([classroom["collected"]])
    assert {r["name"]: r.get("differs") for r in records} == {n: "optimizer.lr=0.5" if n == "s07" else None
                                                                 for n in NAMES}
    page = report.render(records)
    assert "<title>attnlab · 30 runs · Your journey starts with one step · differ in optimizer.lr</title>" in page


@pytest.mark.parametrize("key, value", [("name", "a\x1bb"), ("name", "x" * 101), ("notes", "line\nbreak"),
                                        ("notes", "y" * 2001)])
def test_name_and_notes_are_text_on_one_line(key, value):
    cfg = compose_cfg()
    cfg[key] = value
    with pytest.raises(ConfigError) as err:
        checks.validate(cfg)
    limit = 100 if key == "name" else 2000
    assert str(err.value).endswith(f": must be text of at most {limit} characters on one line (no control characters)")
    cfg[key] = "李雷 & Han Meimei, 2nd try"
    checks.validate(cfg)
