"""A report page a learner shares names no folder of the author's machine, shows what the run measured
as a learner reads it (no raw summary.json), and no sentence a run that read a file never used."""
from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf
from report_helpers import page_data

from attnlab.commands import report as report_command
from attnlab.commands.job import run_job

from conftest import ROOT, compose_cfg


def test_a_gpt_page_holds_no_absolute_path_and_shows_its_continuation(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "deep" / "folder" / "gpt"
    cfg = compose_cfg("experiment=gpt", "train.steps=3", "train.snapshot_steps=[0,2]", "logging=off",
                      "logging.console=false", "analysis.max_new_tokens=3")
    assert run_job(cfg, run).status == "completed"
    (run / ".hydra").mkdir()
    (run / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(cfg), encoding="utf-8")
    page = tmp_path / "page.html"
    assert report_command.main([str(run), "-o", str(page)]) == 0
    text = page.read_text(encoding="utf-8")
    for folder in {str(tmp_path), str(ROOT), str(Path.home())} - {"/"}:
        assert folder not in text, folder
    record = page_data(page)["runs"][0]
    assert record["run_dir"] == "gpt" and record["config"]["text_file"] == "attnlab/data/weather_zh.txt"
    assert "sentence" not in record["config"]  # the run read a file: its sentence was never used
    shown = {o["title"]: o["text"] for o in record["observations"]}
    assert shown["continuation"].startswith("'今天天气真' → ") and "\ufffd" not in shown["continuation"]
    assert "validation loss" in shown and not any(t.startswith("{") for t in shown.values())  # no raw JSON
