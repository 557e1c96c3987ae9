"""Every bad input we know of, and exactly what the user sees.

``CASES`` is the one list: the tests below check each case (in-process through ``job.run_job``
where the subprocess adds nothing, and a few through the real ``attnlab`` command), and
``python tests/test_bad_input.py`` runs every case through the real commands and writes
``docs/bad_inputs.md`` from what they printed. ``test_doc_is_current`` keeps the two in step.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from attnlab.commands.job import run_job
from attnlab.core import config
from attnlab.core.errors import ConfigError
from attnlab.outputs import artifacts
from attnlab.saved import safe_read

from conftest import ROOT, compose_cfg

DOC = ROOT / "docs" / "bad_inputs.md"
QUIET = ("logging=off",)  # added to every command; not shown in the doc


@dataclass(frozen=True)
class Case:
    id: str
    what: str  # the bad input, in words
    args: tuple[str, ...]  # `attnlab ARGS` (or `attnlab-reproduce RUN_DIR` for kind "reproduce")
    kind: str  # ours: our one-line error, summary failed | hydra: Hydra's report made one line by attnlab.commands.cli | ok: accepted
    expect: str  # must be in stderr (ours / hydra), names the key and value
    cli: bool = False  # also run through the real command in the test suite


CASES = [
    # issue 2: config checks
    Case("mistyped_key", "a mistyped key", ("model.d_mdl=3",), "hydra",
         "error: model.d_mdl=3: no such config key (`attnlab --help` lists every key); did you mean model.d_model?",
         cli=True),
    Case("mistyped_group", "a mistyped group", ("optimzer=sgd",), "hydra",
         "error: optimzer=sgd: no such config key (`attnlab --help` lists every key); did you mean optimizer?"),
    Case("mistyped_optimizer_key", "a mistyped key of an optimizer", ("optimizer=sgd", "optimizer.momentun=0.9"),
         "hydra", "did you mean optimizer.momentum?"),
    Case("key_without_section", "a key without its section", ("lr=0.1",), "hydra",
         "error: lr=0.1: no such config key (`attnlab --help` lists every key); did you mean optimizer.lr?"),
    Case("wrong_type", "a value of the wrong type", ("model.d_model=abc",), "hydra",
         "error: model.d_model='abc': must be an integer", cli=True),
    Case("wrong_choice", "a value outside an enum", ("model.positional=xx",), "hydra",
         "error: model.positional='xx': must be one of: learned, none"),
    Case("unknown_optimizer", "an unknown optimizer", ("optimizer=rmsprop",), "hydra",
         "error: optimizer=rmsprop: no such option; allowed: adam, adamw, sgd", cli=True),
    Case("optimizer_target", "an optimizer `_target_` we do not ship", ("optimizer._target_=os.system",), "ours",
         "optimizer._target_='os.system': must be one of the shipped optimizers"),
    Case("empty_sentence", "an empty sentence", ("sentence=",), "ours", "sentence='': is empty"),
    Case("one_token", "a one-token sentence", ("sentence=Hello",), "ours", "sentence='Hello': has 1 token"),
    Case("d_model_zero", "a non-positive dimension", ("model.d_model=0",), "ours", "model.d_model=0: must be a positive integer", cli=True),
    Case("d_k_negative", "a negative dimension", ("model.d_k=-1",), "ours", "model.d_k=-1: must be a positive integer"),
    Case("d_v_differs", "d_v different from d_model (an output projection brings Z back to d_model)", ("model.d_v=4",),
         "ok", "[7120, 7002, 4940, 351, 530, 2239]"),
    Case("init_std_negative", "init std < 0", ("model.init_std=-0.5",), "ours", "model.init_std=-0.5: must be >= 0"),
    Case("lr_zero", "lr = 0", ("optimizer.lr=0",), "ours", "optimizer.lr=0.0: must be a positive finite number"),
    Case("lr_negative", "lr < 0", ("optimizer=sgd", "optimizer.lr=-0.1"), "ours", "optimizer.lr=-0.1: must be a positive finite number"),
    Case("lr_inf", "lr = inf", ("optimizer.lr=inf",), "ours", "optimizer.lr=inf: must be a positive finite number"),
    Case("steps_zero", "steps = 0", ("train.steps=0",), "ours", "train.steps=0: must be a positive integer"),
    Case("snapshot_outside", "a snapshot step ≥ steps", ("train.snapshot_steps=[0,201]",), "ours",
         "train.snapshot_steps=[0, 201]: every step must be in [0, train.steps=201)"),
    Case("snapshot_every_zero", "snapshots every 0 steps", ("train.snapshot_every=0",), "ours",
         "train.snapshot_every=0: must be a positive integer"),
    Case("snapshot_every_and_list", "snapshot steps both listed and spaced",
         ("train.snapshot_every=10", "train.snapshot_steps=[0]"), "ours",
         "train.snapshot_every=10: must be a positive integer (the steps between snapshots) and "
         "train.snapshot_steps null"),
    Case("snapshot_negative", "a negative snapshot step", ("train.snapshot_steps=[-1]",), "ours",
         "train.snapshot_steps=[-1]: every step must be in [0, train.steps=201)"),
    Case("focus_outside", "a focus token outside the sentence", ("train.focus_token=6",), "ours",
         "train.focus_token=6: must be a token position in [0, 6)"),
    Case("focus_absent", "a focus text the sentence does not hold", ("train.focus_token=旅",), "ours",
         "train.focus_token='旅': is not in the text; its tokens: 0 'Your', 1 ' journey'"),
    Case("focus_ambiguous", "a focus text in two tokens", ("train.focus_token=o",), "ours",
         "train.focus_token='o': is in the text 3 times, at tokens 0 'Your', 1 ' journey', 4 ' one': give the position"),
    Case("loss_threshold", "a non-positive loss threshold", ("train.loss_threshold=0",), "ours", "train.loss_threshold=0.0: must be > 0"),
    Case("device", "an unknown device", ("device=tpu",), "ours", "device='tpu': must be cpu"),
    # issue 5: text and tokenizer
    Case("endoftext_special", "`<|endoftext|>` in the sentence (default)", ('sentence="Your journey<|endoftext|> starts"',), "ok",
         "[7120, 7002, 50256, 4940]"),
    Case("endoftext_text", "`<|endoftext|>` with `tokenizer.special_tokens=text`",
         ('sentence="Your journey<|endoftext|> starts"', "tokenizer.special_tokens=text"), "ok",
         "[7120, 7002, 27, 91, 437, 1659, 5239, 91, 29, 4940]"),
    Case("endoftext_unquoted", "`<|endoftext|>` without Hydra quoting (free text is quoted for Hydra)",
         ("sentence=Your journey<|endoftext|> starts",), "ok", "[7120, 7002, 50256, 4940]"),
    Case("too_long", "a sentence longer than `tokenizer.max_tokens`", ("tokenizer.max_tokens=5",), "ours",
         "sentence='Your journey starts with one step': has 6 tokens, more than tokenizer.max_tokens=5"),
    Case("max_tokens_zero", "a non-positive `tokenizer.max_tokens`", ("tokenizer.max_tokens=0",), "ours",
         "tokenizer.max_tokens=0: must be a positive integer"),
    Case("unknown_encoding", "an encoding attnlab does not ship (it would be downloaded)", ("tokenizer.encoding=nope",), "ours",
         "tokenizer.encoding='nope': must be gpt2"),
    Case("text_file_missing", "a `text_file` that does not exist", ("text_file=/nonexistent/text.txt",), "ours",
         "text_file='/nonexistent/text.txt': must be a readable UTF-8 file"),
    # issue 10: values that Hydra/OmegaConf resolve or refuse
    Case("text_interpolation_quoted", "`${...}` in a quoted sentence (free text is literal)",
         ('sentence="costs ${price} today"',), "ok", "[15805, 82, 25597, 20888, 92, 1909]"),
    Case("text_interpolation_unquoted", "`${...}` in an unquoted sentence (free text is literal)",
         ("sentence=costs ${price} today",), "ok", "[15805, 82, 25597, 20888, 92, 1909]"),
    Case("env_unset", "`${oc.env:VAR}` of an unset variable", ("model.d_model=${oc.env:ATTNLAB_UNSET_VARIABLE}",), "ours",
         "model.d_model='${oc.env:ATTNLAB_UNSET_VARIABLE}': cannot be resolved: KeyError raised while resolving "
         "interpolation: \"Environment variable 'ATTNLAB_UNSET_VARIABLE' not found\"", cli=True),
    Case("interpolation_missing", "an interpolation of a missing key", ("model.d_k=${model.nope}",), "ours",
         "model.d_k='${model.nope}': cannot be resolved: Interpolation key 'model.nope' not found"),
    Case("interpolation_recursive", "a recursive interpolation", ("model.d_k=${model.d_k}",), "ours",
         "model.d_k='${model.d_k}': cannot be resolved: Recursive interpolation detected"),
    Case("unknown_resolver", "an unknown resolver", ("model.d_k=${nope:1}",), "ours",
         "model.d_k='${nope:1}': cannot be resolved: Unsupported interpolation type nope"),
    Case("comma_text", "a comma in an unquoted sentence (a single run)", ("sentence=Hello, world",), "hydra",
         "error: sentence='Hello, world': a comma separates values; to keep it in the value, quote it for Hydra and "
         "the shell: 'sentence=\"Hello, world\"'; with -m (--multirun) the commas sweep over the values", cli=True),
    Case("text_split_by_shell", "a sentence with a space the shell split into two arguments", ("sentence=Hello", "world"),
         "hydra", "error: 'world': not an override (key=value); a text with spaces must be one argument", cli=True),
    Case("text_trailing_comma", "a sentence ending in an unquoted comma", ("sentence=Hello,",), "hydra",
         "error: sentence='Hello,': a comma separates values; to keep it in the value, quote it"),
    Case("text_unclosed_quote", "a sentence starting with a quote it never closes", ('sentence="unclosed',), "hydra",
         "error: 'sentence=\"unclosed': not valid override syntax (LexerNoViableAltException"),
    Case("list_unclosed", "a list that is never closed", ("train.snapshot_steps=[0,10",), "hydra",
         "error: 'train.snapshot_steps=[0,10': not valid override syntax (no viable alternative at input '[0,10'); "
         "quote values that contain"),
    Case("seed_overflow", "a seed beyond 64 bits", ("seed=18446744073709551616",), "ours",
         "seed=18446744073709551616: must be an integer in [-9223372036854775808, 18446744073709551615] "
         "(what torch.manual_seed accepts)"),
    Case("seed_underflow", "a seed below -2^63", ("seed=-9223372036854775809",), "ours",
         "seed=-9223372036854775809: must be an integer in [-9223372036854775808, 18446744073709551615]"),
    Case("steps_overflow", "a step count beyond int64", ("train.steps=9223372036854775808",), "ours",
         "train.steps=9223372036854775808: must be a positive integer"),
    Case("d_k_overflow", "a dimension beyond int64", ("model.d_k=9223372036854775808",), "ours",
         "model.d_k=9223372036854775808: must be a positive integer"),
    Case("focus_overflow", "a focus position beyond int64", ("train.focus_token=9223372036854775808",), "ours",
         "train.focus_token=9223372036854775808: must be a token position"),
    Case("float_overflow", "an integer too large for a float key (any of them: lr, init_std, dropout, ...)",
         ("train.loss_threshold=1" + "0" * 400,), "hydra", "too large for a float (at most 1.8e308)", cli=True),
    Case("betas_out_of_range", "Adam betas outside [0, 1)", ("optimizer.betas=[2.0,2.0]",), "ours",
         "optimizer.betas=[2.0, 2.0]: must be two numbers in [0, 1), e.g. [0.9,0.999]"),
    Case("betas_one", "one Adam beta", ("optimizer.betas=[0.9]",), "ours",
         "optimizer.betas=[0.9]: must be two numbers in [0, 1)"),
    Case("betas_target", "a `_target_` hidden in the betas", ("optimizer.betas=[{_target_:builtins.print},0.9]",), "ours",
         "optimizer.betas=[{'_target_': 'builtins.print'}, 0.9]: must be two numbers in [0, 1)"),
    Case("eps_negative", "a negative eps", ("optimizer.eps=-1",), "ours", "optimizer.eps=-1.0: must be >= 0 and finite"),
    Case("weight_decay_negative", "a negative weight decay", ("optimizer.weight_decay=-1",), "ours",
         "optimizer.weight_decay=-1.0: must be >= 0 and finite"),
    Case("momentum_negative", "a negative SGD momentum", ("optimizer=sgd", "optimizer.momentum=-1"), "ours",
         "optimizer.momentum=-1.0: must be >= 0 and finite"),
    Case("nesterov_no_momentum", "Nesterov without momentum", ("optimizer=sgd", "optimizer.nesterov=true"), "ours",
         "optimizer.nesterov=True: needs optimizer.momentum > 0 and optimizer.dampening=0 (momentum=0.0, dampening=0.0)"),
    Case("memory", "a model that cannot fit in memory", ("model.d_model=100000",), "ours",
         "model.d_model=100000: the run needs about 167.8 GiB of memory (token_embedding 18.7 GiB, attention "
         "149.0 GiB, activations 18.3 MiB), more than the"),
    Case("metrics_limit", "a metrics.csv larger than attnlab's readers accept", ("train.steps=10000000",), "ours",
         "train.steps=10000000: the run's metrics.csv would be about 314.7 MiB, more than the 64.0 MiB attnlab's "
         "readers accept"),
    Case("attention_limit", "an attention.npz larger than attnlab's readers accept",
         ("model.n_heads=2000000", "model.d_model=1", "model.d_k=1", "model.d_v=1", "logging.console=false"), "ours",
         "train.snapshot_steps='5 snapshots of 2000000 head(s) x 6 x 6 tokens': the run's attention.npz would be "
         "about 1.3 GiB, more than the 1.0 GiB attnlab's readers accept"),
    Case("heads_drawn", "more heatmaps than a run may draw", ("model.n_heads=10000", "logging.figures=true"), "ours",
         "model.n_heads=10000: about 50,005 heatmaps to draw (figures and TensorBoard images), more than 1,000: "
         "fewer heads or snapshots, or logging.figures=false logging.images=false"),
    Case("heads_console", "console lines wider than a run may print", ("model.n_heads=1000", "logging.console=true"),
         "ours", "model.n_heads=1000: about 24,000 characters in each snapshot's console line, more than 10,000: "
                 "fewer heads, or logging.console=false"),
    Case("threads_many", "more torch threads than the machine can run", ("threads=10000",), "ours",
         "threads=10000: more than 4 per CPU of this machine's"),
    # issue 24: what the OS and Hydra hand over
    Case("text_file_device", "a `text_file` that is a device (it never ends)", ("text_file=/dev/zero",), "ours",
         "text_file='/dev/zero': must be a readable UTF-8 file (is a character device, not a regular file (refused))"),
    Case("text_file_folder", "a `text_file` that is a folder", ("text_file=/",), "ours",
         "text_file='/': must be a readable UTF-8 file (is a directory, not a regular file (refused))"),
    Case("latin1_argv", "text from a terminal whose encoding is not UTF-8 (Latin-1 `é`)", ("sentence=caf\udce9 au lait",),
         "hydra", "error: 'sentence=caf\\xe9 au lait': not UTF-8 text (the terminal's encoding is another)", cli=True),
    Case("hydra_output_subdir", "Hydra told to save `.hydra/` itself", ("hydra.output_subdir=.hydra",), "hydra",
         "error: hydra.output_subdir=.hydra: attnlab sets hydra.output_subdir (Hydra writes nothing into a run dir",
         cli=True),
    Case("hydra_job_logging", "Hydra's job log, which it writes into the run dir", ("hydra/job_logging=default",),
         "hydra", "error: hydra/job_logging=default: attnlab sets hydra/job_logging", cli=True),
    Case("hydra_log_file", "a log file handler added to Hydra's job logging",
         ("+hydra.job_logging.handlers.f={class:logging.FileHandler,filename:x.log}",), "hydra",
         "error: +hydra.job_logging.handlers.f={class:logging.FileHandler,filename:x.log}: attnlab sets "
         "hydra/job_logging (Hydra writes nothing", cli=True),
    Case("hydra_log_handler", "a file handler put into Hydra's own log",
         ("hydra.hydra_logging.handlers.console.class=logging.FileHandler",), "hydra",
         "error: hydra.hydra_logging.handlers.console.class=logging.FileHandler: refused: a handler of Hydra's log "
         "could write a file before attnlab holds the folder; choose hydra/hydra_logging=default, disabled or none",
         cli=True),
    Case("hydra_log_added_handler", "a file handler added to Hydra's own log",
         ("+hydra.hydra_logging.handlers.f={class:logging.FileHandler,filename:x.log}",), "hydra",
         "error: +hydra.hydra_logging.handlers.f={class:logging.FileHandler,filename:x.log}: refused: a handler",
         cli=True),
    Case("hydra_log_option", "Hydra's own log silenced (a group option: allowed)", ("hydra/hydra_logging=disabled",),
         "ok", "[7120, 7002, 4940, 351, 530, 2239]"),
    # issue 10: text as typed, keys that exist
    Case("chinese_unquoted", "Chinese text without Hydra quoting", ("sentence=你的旅程从一步开始",), "ok",
         "[19526, 254, 21410, 33768, 227, 163, 101, 233, 20015, 236, 31660, 29826, 98, 28156, 222, 34650, 233]"),
    Case("added_key", "`+key` for a key attnlab does not have", ("+train.stepz=500",), "hydra",
         "error: +train.stepz=500: no such config key; attnlab's keys are fixed by its schema", cli=True),
    Case("added_key_close", "`+key` close to a key attnlab has", ("+train.stepz=500",), "hydra",
         "(`attnlab --help` lists them); did you mean train.steps?"),
    Case("force_added_key", "`++key` for a key attnlab does not have", ("++model.heads=2",), "hydra",
         "error: ++model.heads=2: no such config key"),
    Case("deleted_key", "`~key` deleting a key attnlab needs", ("~train.steps",), "hydra",
         "error: ~train.steps: no such config key"),
    Case("steps_only", "only `train.steps` changed (snapshots follow the run)", ("train.steps=100",), "ok",
         "[7120, 7002, 4940, 351, 530, 2239]"),
    # issue 14: torch's threads
    Case("threads_zero", "zero threads", ("threads=0",), "ours", "threads=0: must be auto or a positive integer"),
    Case("threads_word", "threads that are neither auto nor a number", ("threads=many",), "ours",
         "threads='many': must be auto or a positive integer"),
    # issue 12: the model variants
    Case("heads_zero", "zero heads", ("model.n_heads=0",), "ours", "model.n_heads=0: must be a positive integer"),
    Case("dropout_one", "dropout 1 (every weight zeroed)", ("model.dropout=1",), "ours",
         "model.dropout=1.0: must be in [0, 1) (the probability of zeroing a weight)"),
    Case("out_proj_mismatch", "no output projection while n_heads·d_v ≠ d_model", ("model.n_heads=2", "model.out_proj=false"),
         "ours", "model.out_proj=False: Z has n_heads·d_v = 2·6 = 12 columns but the loss needs d_model = 6; use "
                 "out_proj=auto or true (a W_out brings Z to d_model), or make n_heads·d_v = d_model"),
    Case("out_proj_word", "an out_proj that is not auto/true/false", ("model.out_proj=maybe",), "ours",
         "model.out_proj='maybe': must be auto, true or false"),
    Case("attention_path", "an unknown attention path", ("model.attention=flash",), "hydra",
         "error: model.attention='flash': must be one of: explicit, sdpa"),
    Case("objective", "an unknown objective", ("train.objective=ce",), "hydra",
         "error: train.objective='ce': must be one of: mse, next_token"),
    # issue 28: the mini-GPT
    Case("gpt_mse", "a GPT with the tutorial's mse objective", ("model.n_layers=2",), "ours",
         "model.n_layers=2: N >= 1 builds a GPT, which trains with task=train train.objective=next_token"),
    Case("gpt_walkthrough", "a GPT walkthrough", ("model.n_layers=1", "train.objective=next_token",
                                                  "task=walkthrough"), "ours", "model.n_layers=1: N >= 1 builds a GPT"),
    Case("layers_negative", "a negative number of layers", ("model.n_layers=-1",), "ours",
         "model.n_layers=-1: must be an integer >= 0"),
    Case("context_without_gpt", "a context window for the tutorial's layer", ("model.context=4",), "ours",
         "model.context=4: needs model.n_layers >= 1"),
    Case("batch_without_gpt", "batches for the tutorial's layer", ("train.batch_size=4",), "ours",
         "train.batch_size=4: needs model.n_layers >= 1"),
    Case("context_too_long", "a window longer than the text", ("model.n_layers=1", "train.objective=next_token",
                                                              "model.context=7"), "ours",
         "model.context=7: a window must have 2 to 6 tokens (the text's 6 trained on)"),
    Case("val_one_token", "a held-out tail of 1 token", ("model.n_layers=1", "train.objective=next_token",
                                                         "train.val_fraction=0.1"), "ours",
         "train.val_fraction=0.1: holds out 1 token of 6"),
    Case("prompt_mse", "a prompt for the mse objective", ("analysis.prompt=Your",), "ours",
         "analysis.prompt='Your': a non-empty text, with task=train train.objective=next_token"),
    Case("top_k_zero", "top-k 0", ("train.objective=next_token", "analysis.top_k=0"), "ours",
         "analysis.top_k=0: must be a positive integer or null"),
]
CASE_IDS = [c.id for c in CASES]
MACHINE_DEPENDENT = {"memory", "threads_many"}  # their message ends with this machine's memory / CPUs

# attnlab-reproduce and run-dir cases: (id, what, how the folder is made, expected in stderr)
REPRODUCE_CASES = [
    ("rerun_same_dir", "`attnlab` again into a finished run's `hydra.run.dir`", "finished run",
     "already holds a completed run; choose another hydra.run.dir (runs are never overwritten)"),
    ("repro_missing", "`attnlab-reproduce` on a folder that does not exist", "nothing", "RUN_DIR: not a directory"),
    ("repro_no_config", "`attnlab-reproduce` on a folder without `.hydra/config.yaml`", "a run with `.hydra/` deleted",
     "RUN_DIR/.hydra/config.yaml: missing"),
    ("repro_unreadable", "`attnlab-reproduce` with an unparsable config.yaml", "config.yaml = `model: [unclosed`",
     "config.yaml: unreadable"),
    ("repro_schema", "`attnlab-reproduce` with a config of another schema", "config.yaml has `model.n_experts: 2`",
     "model.n_experts=2: is not a key of attnlab's config schema"),
    ("repro_target", "`attnlab-reproduce` with `_target_: os.system` in the saved config",
     "optimizer `_target_` edited to `os.system`", "optimizer._target_='os.system': must be one of the shipped optimizers"),
    ("repro_running", "`attnlab-reproduce` on a run that never finished", "summary.json says running",
     "summary.json: says running"),
    ("foreign_files", "`attnlab hydra.run.dir=''` (the current folder) where the user keeps files",
     "the user's own `metrics.csv` and `notes.txt`", "holds files attnlab did not write (metrics.csv, notes.txt)"),
    ("killed_run", "`attnlab` into the folder of a run that was killed (`kill -9`)",
     "summary.json says running and no process holds its lock", "holds a run that was killed"),
    ("live_run", "`attnlab` into the folder of a run that is still going", "another process holds its lock",
     "another attnlab process (pid PID) is writing a run there"),
]


# --- in-process: every case of ours -----------------------------------------------------------

_OURS: dict[str, tuple] = {}  # case id: (run_job's result, its run dir), run once per process


def ours(case: Case, tmp_path_factory) -> tuple:
    """``case`` (one of ours) run in-process, once for the tests that look at it."""
    if case.id not in _OURS:
        run = tmp_path_factory.mktemp(case.id)
        _OURS[case.id] = (run_job(compose_cfg(*case.args, *QUIET), run), run)
    return _OURS[case.id]


@pytest.mark.parametrize("case", [c for c in CASES if c.kind == "ours"], ids=lambda c: c.id)
def test_our_errors_name_key_value_and_allowed(case, tmp_path_factory):
    result, tmp_path = ours(case, tmp_path_factory)
    assert result.status == "failed"
    assert result.bad_input
    message = result.error
    assert "\n" not in message
    assert case.expect in message
    summary = safe_read.read_summary(tmp_path)
    assert summary["status"] == "failed"
    assert summary["error"] == message
    assert not (tmp_path / "metrics.csv").exists()


@pytest.mark.parametrize("case", [c for c in CASES if c.id in ("context_too_long", "val_one_token", "context_without_gpt")],
                         ids=lambda c: c.id)
def test_a_gpts_windows_are_checked_with_the_config_before_a_model_is_built(case, monkeypatch):
    """checks.validated_tokens (values, text, a GPT's windows) refuses these; nothing is built."""
    from attnlab.core import checks, training

    monkeypatch.setattr(training, "build_model", lambda *a, **k: pytest.fail("a model was built"))
    with pytest.raises(ConfigError, match=re.escape(case.expect)):
        checks.validated_tokens(config.apply_schema(compose_cfg(*case.args)))


@pytest.mark.parametrize("case", [c for c in CASES if c.kind == "ok"], ids=lambda c: c.id)
def test_accepted_inputs_train_on_the_expected_tokens(case, tmp_path):
    short = () if any(a.startswith("train.steps=") for a in case.args) else ("train.steps=5", "train.snapshot_steps=[0]")
    cfg = compose_cfg(*case.args, *QUIET, *short)
    assert run_job(cfg, tmp_path).status == "completed"
    assert str(safe_read.read_attention(tmp_path)["token_ids"].tolist()) == case.expect


def test_changing_only_the_steps_scales_the_snapshots(tmp_path):
    from attnlab.core.config import snapshot_steps

    # §5's fractions of the run, and §5's learning-phase steps 20, 50, 100 that the run has
    expected = {201: [0, 20, 50, 100, 200], 100: [0, 10, 20, 25, 50, 99], 30: [0, 3, 7, 15, 20, 29], 2: [0, 1],
                1: [0], 5000: [0, 20, 50, 100, 500, 1250, 2500, 4999]}
    for steps, snaps in expected.items():
        assert snapshot_steps(compose_cfg(f"train.steps={steps}").train) == snaps, steps
    assert snapshot_steps(compose_cfg("train.snapshot_steps=[7,3,3]").train) == [3, 7]  # a list is taken as given
    assert snapshot_steps(compose_cfg("train.snapshot_every=40").train) == [0, 40, 80, 120, 160, 200]
    assert snapshot_steps(compose_cfg("train.snapshot_every=7", "train.steps=15").train) == [0, 7, 14]
    assert run_job(compose_cfg(*QUIET, "train.steps=100"), tmp_path).status == "completed"
    assert safe_read.read_attention(tmp_path)["steps"].tolist() == [0, 10, 20, 25, 50, 99]


def grammar_error(args: tuple[str, ...]) -> str | None:
    """Hydra's own message for the first of ``args`` (made Hydra syntax as the command does) that
    its override grammar refuses, or None."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from attnlab.commands.argv import prepare

    try:
        OverridesParser.create().parse_overrides(prepare(list(args)))
    except Exception as err:
        return err
    return None


@pytest.mark.parametrize("case", [c for c in CASES if c.kind == "hydra" and grammar_error(c.args)], ids=lambda c: c.id)
def test_override_grammar_errors_name_the_argument_and_what_to_type(case):
    from attnlab.commands.cli import error_line

    line = error_line(grammar_error(case.args), list(case.args))
    assert "\n" not in line
    assert case.expect in line
    assert "expecting {" not in line  # the grammar's token list says nothing to a user


# --- the command in this process: one case per kind of refusal ------------------------------

@pytest.mark.parametrize("case", [c for c in CASES if c.cli], ids=lambda c: c.id)
def test_the_command_prints_one_line_and_exits_2(case, tmp_path, attnlab_here):
    proc = attnlab_here(f"hydra.run.dir={tmp_path / 'run'}", *QUIET, *case.args)
    assert (proc.returncode, proc.stderr.count("\n")) == (2, 1), proc.stderr
    assert proc.stderr.startswith("error: ") and case.expect in proc.stderr
    if case.kind == "ours":  # refused by attnlab's checks: the run dir records it
        summary = safe_read.read_summary(tmp_path / "run")
        assert (summary["status"], f"error: {summary['error']}\n") == ("failed", proc.stderr)
    else:  # refused while Hydra composes the config, before any run dir exists
        assert not (tmp_path / "run").exists()


def test_hydra_options_that_would_run_code_or_cannot_resolve_are_one_line(tmp_path, attnlab_here):
    """--experimental-rerun unpickles a file (code, when the file comes from someone else's run
    dir): refused before Hydra reads it. A hydra.run.dir / hydra.sweep.dir that cannot be
    resolved: one line."""
    import pickle

    canary = tmp_path / "PWNED"
    evil = tmp_path / "config.pickle"
    evil.write_bytes(pickle.dumps(_Canary(str(canary))))
    for option in ("--experimental-rerun", "--experimental-r"):  # argparse takes an option cut short too
        proc = attnlab_here(option, str(evil))
        assert (proc.returncode, proc.stderr.count("\n")) == (2, 1), proc.stderr
        assert proc.stderr.startswith("error: --experimental-rerun: refused: it unpickles")
        assert not canary.exists()
    for args, line in [
        (("hydra.run.dir=${oc.env:ATTNLAB_UNSET_VARIABLE}",),
         "error: hydra.run.dir='${oc.env:ATTNLAB_UNSET_VARIABLE}': cannot be resolved: "),
        (("-m", "hydra.sweep.dir=${nope}", "seed=1,2"),
         "error: hydra.sweep.dir='${nope}': cannot be resolved: Interpolation key 'nope' not found\n"),
    ]:
        proc = attnlab_here(*args, *QUIET, cwd=tmp_path)
        assert (proc.returncode, proc.stderr.count("\n")) == (2, 1), proc.stderr
        assert proc.stderr.startswith(line)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.pickle"]  # no run dir, no sweep dir


@pytest.mark.parametrize("args, line", [
    (("--frobnicate",), "error: --frobnicate: no such option (`attnlab --help` lists the options)\n"),
    (("-m", "--cfg", "job"), "error: Only one of --run, --multirun, --cfg, --info and --shell_completion can be "
                             "specified (`attnlab --help` lists the options)\n"),
])
def test_hydra_options_used_wrongly_end_in_one_error_line(tmp_path, args, line, attnlab_here):
    """An option Hydra does not have (refused before Hydra's argument parser sees it), and
    Hydra's own option checks."""
    proc = attnlab_here(*args, cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (2, line)
    assert list(tmp_path.iterdir()) == []


class _Canary:
    """Unpickling it creates ``path`` (what a hostile pickle in a run dir could do)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_hydra_log_options_pass_the_command_line_checks():
    """Choosing Hydra's log option is allowed (only its handlers are refused)."""
    from attnlab.commands.cli import refusal

    assert [refusal([a]) for a in ("hydra/hydra_logging=disabled", "hydra/hydra_logging=none")] == [None, None]
    assert refusal(["hydra.hydra_logging.root.level=DEBUG"]).startswith("error: hydra.hydra_logging.root.level=DEBUG")


def test_hydra_full_error_shows_the_traceback(tmp_path, attnlab_here, monkeypatch):
    from attnlab.core.errors import ConfigError

    monkeypatch.setenv("ATTNLAB_FULL_ERROR", "1")  # what cli.main keeps of the user's HYDRA_FULL_ERROR=1
    with pytest.raises(ConfigError, match="^model.d_model=0: must be a positive integer$"):
        attnlab_here(f"hydra.run.dir={tmp_path / 'run'}", *QUIET, "model.d_model=0")
    assert safe_read.read_summary(tmp_path / "run")["status"] == "failed"


# --- the doc ------------------------------------------------------------------------------------

def cell(text: str) -> str:
    """Text as a Markdown table cell: one code span per line, pipes escaped."""
    lines = [line.replace("`", "'").replace("|", "\\|") for line in text.rstrip("\n").splitlines()]
    return "<br>".join(f"`{line}`" if line.strip() else "" for line in lines) or "(nothing)"


def test_doc_is_current(tmp_path_factory):
    doc = DOC.read_text(encoding="utf-8")
    for case in CASES:
        assert f"| {case.id} |" in doc, f"{case.id} missing from {DOC}: run python tests/test_bad_input.py"
        if case.kind == "ours":
            result, _ = ours(case, tmp_path_factory)
            assert result.bad_input, case.id
            if case.id in MACHINE_DEPENDENT:  # the memory or disk this machine has ends the line
                assert cell(f"error: {case.expect}")[:-1] in doc, case.id
            else:
                assert cell(f"error: {result.error}") in doc, case.id
    for rid, *_ in REPRODUCE_CASES:
        assert f"| {rid} |" in doc


# --- writing the doc from real runs -------------------------------------------------------------

def _run(cmd: list[str], tmp: Path, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env.update({"MPLBACKEND": "Agg", **(env_extra or {})})
    return subprocess.run(cmd, cwd=tmp, env=env, timeout=600, capture_output=True, text=True, stdin=subprocess.DEVNULL)


def _attnlab_case(case: Case, tmp: Path) -> dict:
    run = tmp / case.id
    proc = _run([sys.executable, "-m", "attnlab.commands.cli", f"hydra.run.dir={run}", *QUIET, *case.args], tmp)
    summary = safe_read.read_summary(run) if (run / "summary.json").exists() else {}
    seen = proc.stderr.replace(str(run), "RUN_DIR")
    if case.kind == "ok":
        ids = safe_read.read_attention(run)["token_ids"].tolist()
        seen = f"accepted; token_ids {ids}"
    cmd = shlex.join(["attnlab", *case.args]).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return {"cmd": cmd, "rc": proc.returncode, "seen": seen,
            "status": summary.get("status", "(no run dir)")}


def _reproduce_case(rid: str, tmp: Path, finished: Path) -> dict:
    import shutil

    run = tmp / rid
    if rid in ("rerun_same_dir", "killed_run", "live_run", "foreign_files"):
        from attnlab.outputs import rundir

        where, cmd = tmp, "attnlab hydra.run.dir=RUN_DIR"
        if rid == "foreign_files":
            run.mkdir()
            (run / "metrics.csv").write_text("my own numbers\n")
            (run / "notes.txt").write_text("keep\n")
            where, cmd = run, "cd RUN_DIR && attnlab hydra.run.dir=''"
        elif rid == "live_run":
            run.mkdir()
            rundir.claim(run)  # this process is the live run: it holds the folder's lock
        else:
            shutil.copytree(finished, run)
            if rid == "killed_run":
                artifacts.update_summary(run, status="running")  # what a run killed mid-way leaves
        before = _tree(run)
        proc = _run([sys.executable, "-m", "attnlab.commands.cli", f"hydra.run.dir={'' if where == run else run}", *QUIET],
                    where)
        untouched = _tree(run) == before
        if rid == "live_run":  # then the live run ends
            rundir.release(run)
            proc.stderr = proc.stderr.replace(f"pid {os.getpid()}", "pid PID")
    else:
        if rid != "repro_missing":
            shutil.copytree(finished, run)
        if rid in ("repro_no_config", "repro_unreadable", "repro_schema", "repro_target"):
            # these cases are about .hydra/config.yaml: without the resolved config summary.json also
            # records (which reproduce prefers), as runs of attnlab before it did (tests/hostile_runs.py)
            import json

            summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
            summary.pop("config", None)
            (run / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
        cfg = run / ".hydra" / "config.yaml"
        if rid == "repro_no_config":
            shutil.rmtree(run / ".hydra")
        elif rid == "repro_unreadable":
            cfg.write_text("model: [unclosed\n")
        elif rid == "repro_schema":
            cfg.write_text(cfg.read_text().replace("  d_k: 4\n", "  d_k: 4\n  n_experts: 2\n"))
            summary = json.loads((run / "summary.json").read_text())
            summary.pop("config", None)  # the config of another schema is in .hydra/ only
            (run / "summary.json").write_text(json.dumps(summary))
        elif rid == "repro_target":
            cfg.write_text(cfg.read_text().replace("torch.optim.Adam", "os.system"))
        elif rid == "repro_running":
            artifacts.update_summary(run, status="running")
        before = _tree(run) if run.exists() else None
        proc = _run([sys.executable, "-m", "attnlab.commands.reproduce", str(run)], tmp)
        cmd = "attnlab-reproduce RUN_DIR"
        untouched = None if before is None else _tree(run) == before
    status = safe_read.read_summary(run).get("status", "-") if (run / "summary.json").exists() else "-"
    if untouched is not None:
        status += " (RUN_DIR untouched)" if untouched else " (RUN_DIR CHANGED)"
    return {"cmd": cmd, "rc": proc.returncode, "seen": proc.stderr.replace(str(run), "RUN_DIR"), "status": status}


def _tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def write_doc() -> None:
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        finished = tmp / "finished"
        assert _run([sys.executable, "-m", "attnlab.commands.cli", f"hydra.run.dir={finished}", *QUIET,
                     "train.steps=20", "train.snapshot_steps=[0]"], tmp).returncode == 0
        with ThreadPoolExecutor(max_workers=2) as pool:
            results = list(pool.map(lambda c: _attnlab_case(c, tmp), CASES))
            repro = list(pool.map(lambda r: _reproduce_case(r[0], tmp, finished), REPRODUCE_CASES))
    rows = ["| id | bad input | command | exit | what the user sees (stderr) | summary.json status |",
            "| --- | --- | --- | --- | --- | --- |"]
    for case, r in zip(CASES, results):
        rows.append(f"| {case.id} | {case.what.replace('|', chr(92) + '|')} | {cell(r['cmd'])} | {r['rc']} | {cell(r['seen'])} | {r['status']} |")
    rrows = ["| id | bad input | the folder | command | exit | what the user sees (stderr) | RUN_DIR summary status |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for (rid, what, folder, _), r in zip(REPRODUCE_CASES, repro):
        rrows.append(f"| {rid} | {what} | {folder} | {cell(r['cmd'])} | {r['rc']} | {cell(r['seen'])} | {r['status']} |")
    text = DOC_TEMPLATE.format(table="\n".join(rows), rtable="\n".join(rrows))
    DOC.parent.mkdir(exist_ok=True)
    DOC.write_text(text, encoding="utf-8")
    print(f"wrote {DOC}")


DOC_TEMPLATE = """# Bad inputs and what the user sees

Generated by `python tests/test_bad_input.py` from real runs of the installed commands (every
command also had `logging=off` and a fresh `hydra.run.dir`; that folder is shown as `RUN_DIR`).
`tests/test_bad_input.py` checks every row of ours against the code, so this table stays true.

How to read it:

- **Our checks** (`error: KEY=VALUE: what is allowed`): one line on stderr, no traceback, exit
  status 2, and `summary.json` in the run dir says `failed` with the same message in `error`.
  Set `HYDRA_FULL_ERROR=1` to see the traceback instead.
- **Refused while the config is composed** (a mistyped key, a wrong type, an unknown choice,
  override syntax, a comma in single-run text, `+key`/`~key` for a key attnlab does not have):
  Hydra's report made one line (`error: ...`), exit status 2, no traceback; no run dir is made
  (for a sweep, not even the sweep folder).
- **Free text** (`sentence`, `text_file`, `analysis.compare_sentence`) is taken as typed: Chinese,
  emoji and `<|endoftext|>` need no quoting, `${{...}}` is literal text (never an interpolation or
  a resolver), and an ASCII comma separates sweep values (`-m`).
- A run that starts but does not complete exits 1: `diverged` (a NaN/inf loss, or an update
  torch cannot represent; every step before it is kept, and the message names the likely cause:
  the initialisation when step 0 already overflows, else the learning rate) or `interrupted`
  (Ctrl-C or SIGTERM; every finished step is kept).
- One estimate before the first step (`attnlab.core.checks.resources`) refuses a run that cannot
  finish: memory, each file against the limit attnlab's own readers accept, the free disk,
  heatmaps drawn, console line width, threads. The memory and thread rows end with what this
  machine has, so they differ from machine to machine.

## `attnlab` overrides

{table}

`<|endoftext|>`: by default (`tokenizer.special_tokens=special`) a literal `<|endoftext|>` in
the text becomes GPT-2's special token 50256; with `tokenizer.special_tokens=text` it is encoded
as ordinary text (`<`, `|`, `end`, `of`, `text`, `|`, `>`: seven tokens). On the command line
it needs no Hydra quoting (free text is quoted for Hydra by attnlab), only the shell's, because
of `<`, `|` and the spaces: `attnlab 'sentence=Your journey<|endoftext|> starts'`.

## Run folders: new or empty, one process each, and `attnlab-reproduce`

A run folder (`hydra.run.dir`, `hydra.sweep.dir`, `attnlab-reproduce --out`) must be new or
empty; it is claimed (its lock file `.attnlab.lock` taken) before anything is written into it
(Hydra writes nothing there; attnlab saves `.hydra/` once it holds the folder), so a refused
folder is left exactly as it was (exit status 2, one line). A folder that cannot be
written (read-only, no permission) is refused the same way: `error: hydra.run.dir='RUN_DIR':
cannot write there (read-only file system); choose another hydra.run.dir`.

{rtable}

`attnlab-reproduce` exits 0 when the run reproduced exactly, 1 when something differs (a table
names each quantity, the first differing step and the largest absolute difference), and 2 for
every row above. A saved config is data: it is checked against attnlab's schema before anything
is imported, so a `_target_` outside `torch.optim.Adam`, `torch.optim.AdamW`, `torch.optim.SGD`,
a `hydra:` or `defaults:` section, or any unknown key is refused.
"""


if __name__ == "__main__":
    write_doc()


@pytest.mark.parametrize("betas, expect", [("[0.9,0.95]", None),
                                           ("[2.0,2.0]", "optimizer.betas=[2.0, 2.0]: must be two numbers in [0, 1)"),
                                           ("[0.9]", "optimizer.betas=[0.9]: must be two numbers in [0, 1)")])
def test_a_sequence_given_back_as_a_tuple_is_checked_as_a_list(betas, expect, monkeypatch):
    """OmegaConf >= 2.4 gives the tuple-typed optimizer.betas back as a tuple (2.3: a list): the same values
    pass and the same message refuses (make compat-pre runs the real 2.4)."""
    from omegaconf import OmegaConf

    from attnlab.core import checks

    cfg = config.apply_schema(compose_cfg(f"optimizer.betas={betas}"))
    real = OmegaConf.to_container
    monkeypatch.setattr(OmegaConf, "to_container",
                        lambda *a, **k: tuple(out) if isinstance(out := real(*a, **k), list) else out)
    if expect is None:
        checks.validate(cfg)
    else:
        with pytest.raises(ConfigError, match=re.escape(expect)):
            checks.validate(cfg)


def test_resolvers_registered_through_the_name_this_omegaconf_does_not_deprecate(monkeypatch):
    """OmegaConf >= 2.4's register_resolver (it has replace=) is used, as its register_new_resolver warns
    above a learner's error line; on 2.3 (register_resolver the legacy one) register_new_resolver, silently."""
    import warnings

    from omegaconf import OmegaConf

    from attnlab.commands import hydra_config

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hydra_config.register_resolver("attnlab.test_twice", lambda x: 2 * int(x))
    try:
        assert OmegaConf.create({"a": "${attnlab.test_twice:21}"}).a == 42
    finally:
        OmegaConf.clear_resolver("attnlab.test_twice")
    calls = []
    monkeypatch.setattr(OmegaConf, "register_resolver",
                        lambda name, resolver, *, replace=False: calls.append(("new", name)), raising=False)
    monkeypatch.setattr(OmegaConf, "register_new_resolver", lambda name, resolver: calls.append(("old", name)))
    hydra_config.register_resolver("attnlab.x", int)
    monkeypatch.setattr(OmegaConf, "register_resolver", lambda name, resolver: calls.append(("legacy", name)))
    hydra_config.register_resolver("attnlab.y", int)
    assert calls == [("new", "attnlab.x"), ("old", "attnlab.y")]


def test_the_schema_is_stored_again_with_replace_where_hydra_takes_it(monkeypatch):
    """register_configs stores the schema at every call (lang's default is the locale's then), with
    replace=True where ConfigStore.store has it (Hydra 1.4 warns without it) and without it on Hydra 1.3."""
    from hydra.core.config_store import ConfigStore

    from attnlab.commands import hydra_config

    stored = []
    real = ConfigStore.store

    def store_14(self, name, node, group=None, package=None, provider=None, replace=None):
        stored.append((f"{group}/{name}", replace))
        real(self, name, node, group=group)

    monkeypatch.setattr(ConfigStore, "store", store_14)
    hydra_config.register_configs()
    hydra_config.register_configs()
    names = ["None/base_config", "schema/optimizer/adam", "schema/optimizer/adamw", "schema/optimizer/sgd"]
    assert stored == [(n, True) for n in names] * 2
    stored.clear()
    monkeypatch.setattr(ConfigStore, "store", lambda self, name, node, group=None: (
        stored.append((f"{group}/{name}", None)), real(self, name, node, group=group)))
    hydra_config.register_configs()
    assert stored == [(n, None) for n in names]
    assert ConfigStore.instance().load("schema/optimizer/sgd.yaml").node._target_ == "torch.optim.SGD"


@pytest.mark.parametrize("typed, flag", [
    (["experiment=exercise1"], ["-m"]), (["model.d_model=8", "experiment=seeds"], ["-m"]),
    (["experiment=gpt,exercise2"], ["-m"]), (["+experiment=heads"], ["-m"]),
    (["-m", "experiment=exercise1"], []), (["--multirun", "experiment=exercise1"], []),
    (["experiment=exercise1", "hydra.mode=RUN"], []),
    (["experiment=gpt"], []), (["experiment=tutorial_training"], []), ([], []), (["sentence=exercise1"], []),
    (["experiment=../../conf/experiment/exercise1"], []), (["experiment=no_such_preset"], [])])
def test_a_sweeping_preset_is_passed_to_hydra_with_its_mode(typed, flag):
    """Hydra >= 1.4 picks run or sweep before composing and refuses a preset that changes the mode: the
    command adds -m for a preset attnlab ships with hydra.mode MULTIRUN, unless the mode is given."""
    from attnlab.commands import argv

    assert argv.multirun_flag(typed) == flag


def test_hydra_is_initialized_without_a_warning_about_version_base():
    """Hydra 1.3 warns when version_base is not given, 1.4 when it is: attnlab passes it only to 1.3
    (hydra_config.VERSION_BASE), so composing through the command's path warns about nothing."""
    import warnings

    from hydra import compose
    from hydra.core.global_hydra import GlobalHydra

    from attnlab.commands import config_folder

    GlobalHydra.instance().clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with config_folder._initialize(None):
            assert compose("config").model.d_model == 6



SCHEMA_TYPES = [  # (override, what the key allows in English and in Chinese)
    ("model.d_model=1.5", "must be an integer", "必须是整数"),
    ("optimizer.lr=fast", "must be a number", "必须是数"),
    ("logging.figures=maybe", "must be true or false", "必须是 true 或 false"),
    ("model.positional=sinusoid", "must be one of: learned, none", "必须是以下之一：learned, none"),
    ("model.d_model=null", "must not be null", "不能是 null"),
    ("train.snapshot_steps=5", "must be a list, e.g. [0,10,19]", "必须是列表，如 [0,10,19]"),
]


@pytest.mark.parametrize("override, en, zh", SCHEMA_TYPES)
def test_a_saved_config_of_the_wrong_type_says_what_the_key_allows(override, en, zh):
    """OmegaConf's English type errors (``Value '1.5' of type 'float' could not be converted to Integer``)
    become what the key allows, for a saved ``.hydra/config.yaml`` read back (plain YAML, typed again)."""
    key, value = override.split("=", 1)
    plain = config.OmegaConf.to_container(compose_cfg("logging=off"), resolve=False)
    section, leaf = key.split(".")
    plain[section][leaf] = None if value == "null" else value
    with pytest.raises(ConfigError, match=re.escape(f": {en}")):
        config.apply_schema(plain)


def test_the_command_says_what_the_key_allows_in_the_learners_language(tmp_path):
    """The same sentences from the command line (lang=zh) and for a sweep's list member (an element of a list)."""
    from conftest import run_here

    for override, _, zh in SCHEMA_TYPES[::2] + SCHEMA_TYPES[3:5]:
        key, value = override.split("=", 1)
        proc = run_here("lang=zh", override, "logging=off", f"hydra.run.dir={tmp_path / key}")
        assert proc.returncode == 2 and proc.stderr == f"错误: {key}={value!r}: {zh}\n", proc.stderr
    sweep = run_here("-m", "optimizer.betas=[0.9,0.99],[a,0.99]", "logging=off", f"hydra.sweep.dir={tmp_path / 's'}")
    assert sweep.returncode == 2 and sweep.stderr == "error: optimizer.betas[0]='a': must be a number\n", sweep.stderr
    assert not (tmp_path / "s").exists()  # refused before any job ran


def test_omegaconf_2_4s_tuple_length_says_how_many_values():
    """OmegaConf 2.4 checks a tuple's length itself (``optimizer.betas=[0.9]`` under Hydra 1.4, docs/compat.md)."""
    from attnlab.core.errors import schema_allowed

    assert schema_allowed("TupleConfig length 1 does not match type hint length 2\n    full_key: optimizer.betas") == (
        "must be a list of 2 values")
    assert schema_allowed("something OmegaConf says\nfull_key: x") == "something OmegaConf says"


@pytest.mark.parametrize("typed, meant", [
    ("lr", "optimizer.lr"), ("steps", "train.steps"), ("d_model", "model.d_model"), ("dmodel", "model.d_model"),
    ("n_head", "model.n_heads"), ("+momentum", "optimizer.momentum"), ("optimzer", "optimizer"),
    ("trian.steps", "train.steps"), ("sentense", "sentence"), ("sentence", None), ("xyzzy", None),
])
def test_a_key_without_its_section_or_misspelled_names_the_one_meant(typed, meant):
    assert config.did_you_mean(typed) == meant
