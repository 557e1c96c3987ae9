"""What the ``attnlab`` process imports, read from Python's own ``-X importtime`` report: a bad
value or text is answered before torch, TensorBoard or matplotlib load; a default run never
imports torch's compiler stack, and with two cores it leaves matplotlib to its render child."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from attnlab.outputs import render_process

from conftest import ROOT


def imported(tmp_path, *overrides: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run ``attnlab`` (its console-script entry) with ``-X importtime``; (the process, the
    names of every module it imported)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "attnlab.commands.launch",
                           f"hydra.run.dir={tmp_path / 'run'}", *overrides],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    modules = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
               if line.startswith("import time:") and "|" in line}
    assert "attnlab.commands.cli" in modules  # the report is there: the checks below can fail
    return proc, modules


@pytest.mark.parametrize("overrides,message", [
    (["model.d_model=0"], "error: model.d_model=0: must be a positive integer"),
    (["sentence="], "error: sentence='': is empty: give at least 2 tokens of text"),
    (["train.focus_token=99"], "error: train.focus_token=99: must be a token position in [0, 6)"),
    (["model.out_proj=false", "model.d_v=3"], "error: model.out_proj=False: Z has n_heads·d_v = 1·3 = 3 columns"),
], ids=["value", "empty_text", "focus_token", "out_proj_rule"])
def test_a_bad_value_or_text_is_answered_before_torch_loads(tmp_path, overrides, message):
    proc, modules = imported(tmp_path, *overrides)
    assert proc.returncode == 2 and proc.stderr.splitlines()[-1].startswith(message), proc.stderr[-500:]
    assert not {"torch", "matplotlib", "tensorboard"} & modules


@pytest.mark.skipif(render_process.cores() < render_process.MIN_CORES, reason="the render child needs 2 cores")
def test_a_default_run_loads_neither_the_compiler_nor_matplotlib(tmp_path):
    proc, modules = imported(tmp_path)
    assert proc.returncode == 0, proc.stderr[-500:]
    assert "torch" in modules and "torch.utils.tensorboard" in modules
    assert not {m for m in modules if m.startswith(("torch._dynamo", "torch._inductor"))}
    assert "matplotlib" not in modules  # drawn by the render child
    for name in ("attention_evolution.png", "loss.png", "report.html"):
        assert (tmp_path / "run" / name).stat().st_size > 1000
