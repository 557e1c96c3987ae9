"""README and docs/reference.md promises checked against behaviour: TensorBoard's text tag names and the HParams
``status``/``error`` columns as TensorBoard's own reader lists them, and the ``make run ARGS=...``
forms the README gives for quoted text."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch.utils.tensorboard")

from attnlab.core.records import RunInfo, RunResult  # noqa: E402
from attnlab.outputs.tensorboard import TensorBoardSink  # noqa: E402

from conftest import ROOT  # noqa: E402

README = "\n".join((ROOT / name).read_text(encoding="utf-8") for name in ("README.md", "docs/reference.md"))
CONFIG = {"sentence": "Your journey starts with one step", "optimizer": {"lr": 0.05}}


def readme_row(dashboard: str) -> list[str]:
    """The cells of README's "What each dashboard shows" row for ``dashboard``."""
    for line in README.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] == dashboard:
            return cells
    raise AssertionError(f"no {dashboard} row in README")


def session(run_dir: Path, result: RunResult):
    """Write one run's TensorBoard events; return (EventAccumulator, hparams session start info)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import metadata

    sink = TensorBoardSink(run_dir, images=False)
    try:
        sink.on_start(RunInfo(CONFIG, [7120, 7002], ["Your", " journey"], [0], 1, 1, run_dir))
        sink.on_end(result)
    finally:
        sink.close()
    ea = EventAccumulator(str(run_dir)).Reload()
    content = ea.PluginTagToContent("hparams")
    return ea, metadata.parse_session_start_info_plugin_data(content[metadata.SESSION_START_INFO_TAG])


def test_text_tags_are_the_ones_readme_names(tmp_path):
    ea, _ = session(tmp_path, RunResult("completed", 1, 0.5, 0.1))
    documented = re.findall(r"`([^`]+)`", readme_row("Text")[1])
    assert sorted(ea.Tags()["tensors"]) == sorted(documented) == \
        ["run/config/text_summary", "run/sentence/text_summary", "run/tokens/text_summary"]


def test_hparams_status_and_error_as_readme_says(tmp_path):
    row = readme_row("HParams")
    assert "`status`" in row[1] and "`error`" in row[1]
    _, start = session(tmp_path / "failed", RunResult("diverged", 1, None, 0.1,
                                                      error="loss became nan at step 0 (optimizer.lr=0.05)"))
    assert start.hparams["status"].string_value == "diverged"
    assert start.hparams["error"].string_value == "loss became nan at step 0 (optimizer.lr=0.05)"
    _, start = session(tmp_path / "ok", RunResult("completed", 1, 0.5, 0.1))
    assert start.hparams["status"].string_value == "completed"
    assert start.hparams["error"].string_value == ""


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize("args, sentence", [
    ("'sentence=\"Hello, world\"' optimizer.lr=0.1", "Hello, world"),
    ("'sentence=\"你的旅程从一步开始\"'", "你的旅程从一步开始"),
])
def test_make_run_forms_from_the_readme(args, sentence):
    assert f'make run ARGS="{args.replace(chr(34), chr(92) + chr(34))}' in README
    bin_dir = Path(sys.executable).parent  # this interpreter's venv; -o: never (re)install here
    proc = subprocess.run(["make", "-s", "-C", str(ROOT), f"BIN={bin_dir}", "-o", ".venv/.attnlab-installed",
                           "run", f"ARGS={args} --cfg job"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert f"sentence: {sentence}\n" in proc.stdout
