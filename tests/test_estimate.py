"""The estimate before step 0 covers everything a run holds or computes (core/checks.resources): a
GPT's blocks, d_ff, batch and output head, the files against the limits their readers share
(core/files), the report page; and attnlab-generate checks model.npz before it builds anything."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from attnlab.commands import generate
from attnlab.commands.job import run_job
from attnlab.core import checks, files, tokenizer
from attnlab.core.config import apply_schema
from attnlab.core.errors import ConfigError
from attnlab.core.model import GPT
from attnlab.core.training import model_spec

from conftest import compose_cfg

GIB = 1024 ** 3


def refusal(*overrides: str, run_dir=None, memory: int = 1024 * GIB, monkeypatch=None) -> ConfigError | None:
    """The ConfigError resources() gives for ``attnlab OVERRIDES`` on a machine with ``memory`` bytes free."""
    monkeypatch.setattr(checks, "available_memory", lambda: memory)
    cfg = apply_schema(compose_cfg(*overrides))
    tokens = tokenizer.tokenize(cfg)
    try:
        checks.resources(cfg, tokens.seq_len, tokens.vocab_size, run_dir)
    except ConfigError as err:
        return err
    return None


@pytest.mark.parametrize("overrides, key", [
    (("experiment=gpt", "model.n_layers=1000", "model.d_model=768"), "model.n_layers"),  # 1,000 blocks
    (("experiment=gpt", "model.d_ff=4000000"), "model.n_layers"),  # one wide MLP: the blocks' parameters
    (("experiment=gpt", "train.batch_size=100000"), "train.batch_size"),  # activations and logits of the batch
])
def test_a_gpts_memory_counts_its_blocks_mlp_and_batch(overrides, key, monkeypatch):
    err = refusal(*overrides, memory=8 * GIB, monkeypatch=monkeypatch)
    assert err is not None and err.key == key and "of memory" in str(err) and "more than the 8.0 GiB" in str(err)
    assert refusal("experiment=gpt", memory=8 * GIB, monkeypatch=monkeypatch) is None  # the preset fits


@pytest.mark.parametrize("overrides", [
    ("experiment=gpt",), ("experiment=gpt", "model.qkv_bias=true", "model.d_ff=7", "model.n_heads=3"),
    ("experiment=gpt", "model.n_layers=3", "model.d_v=5", "model.context=9"),
])
def test_the_parameter_count_is_the_models(overrides):
    cfg = apply_schema(compose_cfg(*overrides))
    tokens = tokenizer.tokenize(cfg)
    context = checks.corpus_split(cfg, tokens.seq_len)[1]
    with torch.device("meta"):
        model = GPT(model_spec(cfg), tokens.vocab_size, context)
    assert checks.gpt_parameters(cfg, tokens.vocab_size, context) == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("overrides, key, file", [
    (("experiment=gpt", "model.n_layers=40", "model.d_model=768", "model.d_k=64", "model.n_heads=12",
      "model.context=16"), "model.n_layers", "model.npz"),  # 1.3 GiB of weights
    (("model.n_heads=3700", "model.d_k=1", "logging=off", "logging.console=false"), "model.n_heads", "summary.json"),
    (("experiment=gpt", "model.n_heads=1500", "model.d_k=1", "model.context=16", "logging=off",
      "logging.console=false"), "model.n_heads",
     "summary.json"),  # each block's heads too
])
def test_a_run_whose_file_its_readers_would_refuse_is_refused_before_step_0(overrides, key, file, tmp_path,
                                                                                monkeypatch):
    err = refusal(*overrides, run_dir=tmp_path / "run", monkeypatch=monkeypatch)
    assert err is not None and err.key == key and f"the run's {file} would be about" in str(err)
    assert "attnlab's readers accept" in str(err) and not (tmp_path / "run").exists()


def test_the_summary_estimate_holds_what_runs_write(tmp_path):
    for n, overrides in enumerate([("model.n_heads=64",), ("experiment=gpt", "model.n_heads=16", "model.d_k=1",
                                                           "model.context=16")]):
        cfg = compose_cfg(*overrides, "train.steps=2", "logging=off", "logging.console=false")
        assert run_job(cfg, tmp_path / str(n)).status == "completed"
        typed = apply_schema(cfg)
        tokens = tokenizer.tokenize(typed)
        estimate = checks.disk_estimate(typed, tokens.seq_len, tokens.vocab_size)
        assert (tmp_path / str(n) / "summary.json").stat().st_size <= estimate["summary.json"]
        if typed.model.n_layers:
            assert (tmp_path / str(n) / "model.npz").stat().st_size <= estimate["model.npz"]


def test_a_report_page_past_its_budget_is_refused_unless_logging_report_is_off(tmp_path, monkeypatch):
    text = tmp_path / "long.txt"
    text.write_text(" ".join(f"w{i}" for i in range(1300)))  # 2,600 tokens: two 2,600 x 2,600 snapshots
    long = (f"text_file={text}", "train.snapshot_steps=[0,1]", "train.steps=2", "logging.figures=false",
            "logging.tensorboard=false")
    err = refusal(*long, "logging.report=true", run_dir=tmp_path / "run", monkeypatch=monkeypatch)
    assert err is not None and err.key == "logging.report" and "report.html would hold about" in str(err)
    assert f"more than the {files.PAGE_WEIGHT_BUDGET / 2 ** 20:.1f} MiB a page holds" in str(err)
    assert refusal(*long, "logging.report=false", run_dir=tmp_path / "run", monkeypatch=monkeypatch) is None


@pytest.mark.parametrize("key, hostile", [("n_layers", 100000), ("d_model", 2048), ("d_ff", 10 ** 7)])
def test_generate_checks_model_npz_before_building_a_hostile_config(gpt_run, tmp_path, capsys, key, hostile,
                                                                      monkeypatch):
    import re

    shared = tmp_path / "shared"
    shutil.copytree(gpt_run, shared)
    config = shared / ".hydra" / "config.yaml"
    text, n = re.subn(rf"(?m)^  {key}: .*$", f"  {key}: {hostile}", config.read_text())
    assert n == 1
    config.write_text(text)
    built = []
    monkeypatch.setattr("attnlab.saved.trained.GPT", lambda spec, *a: built.append(spec) or GPT(spec, *a))
    assert generate.main([str(shared), "今天"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model.npz: weights do not fit the run's config" in err
    assert [spec.n_layers for spec in built] == [1]  # only the one-block model on the meta device


def test_generate_refuses_a_diverged_gpt_and_bounds_its_length(gpt_run, tmp_path, capsys):
    shared = tmp_path / "shared"
    shutil.copytree(gpt_run, shared)
    with np.load(shared / "model.npz", allow_pickle=False) as archive:  # the run's own file
        arrays = dict(archive)
    arrays["blocks.W_fc.weight"][0, 0, 0] = np.nan
    np.savez(shared / "model.npz", **arrays)
    assert generate.main([str(shared), "今天"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "blocks.W_fc.weight holds NaN or infinite weights: the run diverged" in err
    assert generate.main([str(gpt_run), "今天", "--max-new-tokens", "1000000000"]) == 2
    err = capsys.readouterr().err
    assert err == ("attnlab-generate: error: analysis.max_new_tokens=1000000000: must be an integer in [1, "
                   f"{checks.MAX_NEW_TOKENS}]\n")
