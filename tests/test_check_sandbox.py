"""attnlab-check runs the learner's code where it cannot end, hang or fake the check
(attnlab.commands.learner): a child process bounded in time and memory; its exit, exceptions and
endless loops are its stage's failure in one line; what it returns must be real numbers."""
from __future__ import annotations

import io
import os

import pytest
from test_check import TUTORIAL

from attnlab.commands import check, learner

LAST = "fix this stage and run attnlab-check again: the stages after it are checked once it passes"


def checked(source: str, **limits) -> tuple[int, list[str], str]:
    out, err = io.StringIO(), io.StringIO()
    status = check.check_source(source, "/nowhere/mine.py", out=out, err=err, **limits)
    return status, out.getvalue().splitlines(), err.getvalue()


def in_stage(line: str, new: str) -> str:
    assert line in TUTORIAL
    return TUTORIAL.replace(line, new)


@pytest.mark.parametrize("code, stage, fault", [
    ("sys.exit(0)", 5, "attention_weights() called sys.exit(0): a stage returns its values, it never ends the program"),
    ("os._exit(0)", 5, "attention_weights() ended the process (exit code 0: os._exit, a crash or the memory limit) "
                       "instead of returning"),
    ("raise KeyboardInterrupt", 5, "attention_weights() raised KeyboardInterrupt: "),
    ("os.kill(os.getpid(), 9)", 5, "attention_weights() ended the process (exit code -9: "),
])
def test_a_stage_that_ends_the_process_is_that_stages_failure(code, stage, fault):
    source = "import os, sys\n" + in_stage("    attn_weights = torch.softmax", f"    {code}\n    attn_weights = torch.softmax")
    status, out, err = checked(source)
    assert (status, err) == (1, "")
    assert [s.endswith(": passed") for s in out[:stage - 1]] == [True] * (stage - 1)
    assert out[stage - 1].startswith(f"stage {stage}/6 ") and out[stage - 1].endswith(": differs")
    assert out[stage].startswith("  " + fault) and out[stage + 1:] == [LAST], out


def test_an_endless_loop_is_stopped_at_the_time_limit():
    source = in_stage("    Q = W_query(X)", "    while True:\n        pass\n    Q = W_query(X)")
    status, out, _ = checked(source, time_limit=1.0)
    assert status == 1
    assert out[2:] == ["stage 3/6 §4.1 Q, K, V, project_qkv(): differs",
                       "  project_qkv() did not return within 1 s (an endless loop?); it was stopped", LAST]


@pytest.mark.parametrize("code, line", [
    ("import sys\nsys.exit(0)\n", "mine.py cannot be loaded: SystemExit: 0 (mine.py, line 2)"),
    ("import os\nos._exit(0)\n", "the file cannot be loaded: it ended the process (exit code 0: "),
    ("raise KeyboardInterrupt\n", "mine.py cannot be loaded: KeyboardInterrupt:  (mine.py, line 1)"),
    ("while True:\n    pass\n", "the file cannot be loaded: it did not return within 1 s"),
])
def test_a_file_that_ends_or_hangs_while_loading_is_one_line(code, line):
    status, out, err = checked(code + TUTORIAL, time_limit=1.0)
    assert (status, out) == (2, [])
    assert err.startswith("attnlab-check: error: " + line) and err.count("\n") == 1


@pytest.mark.parametrize("new, dtype", [
    ("torch.softmax(attn_scores_scaled, dim=-1) + 5j * torch.randn(6, 6)", "complex64"),
    ("(torch.softmax(attn_scores_scaled, dim=-1) > 0.5).long()", "int64"),
    ("(torch.softmax(attn_scores_scaled, dim=-1) > 0.5)", "bool"),
])
def test_weights_must_be_real_numbers(new, dtype):
    status, out, _ = checked(in_stage("torch.softmax(attn_scores_scaled, dim=-1)", new))
    assert status == 1
    assert out[4:] == ["stage 5/6 §4.3 softmax: attention weights, attention_weights(): differs",
                       f"  attn_weights: attention_weights() returned {dtype} values; attn_weights holds real numbers "
                       "(torch.float32)", LAST]


def test_a_shape_with_an_extra_axis_differs():
    status, out, _ = checked(in_stage("    return Z", "    return Z[None]"))
    assert status == 1 and out[5] == "stage 6/6 §4.4 context vectors Z, context_vectors(): differs"
    assert out[6].startswith("  Z: expected (6, 4) [") and out[7].startswith("     got      (1, 6, 4) [")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="the memory bound needs Linux's /proc")
def test_a_stage_past_the_memory_bound_fails_without_harming_the_command():
    source = in_stage("    Q = W_query(X)", "    big = torch.ones(2**28, dtype=torch.float64)\n    Q = W_query(X)")
    status, out, _ = checked(source, memory_limit=256 * 1024 ** 2)  # 2 GiB asked for, 256 MiB allowed
    assert status == 1 and out[2].startswith("stage 3/6 ") and out[2].endswith(": differs")
    assert out[3].startswith("  project_qkv() raised RuntimeError: ") and "alloc" in out[3] and out[4:] == [LAST]


def test_the_runner_works_with_spawn_as_on_windows_and_macos():
    stage = check.stages()[0]
    outcomes = list(learner.run_stages(TUTORIAL, "mine.py", [(stage.function, stage.inputs(), ["token_embeddings"])],
                                       method="spawn"))
    assert [(o.stage, o.error) for o in outcomes] == [(-1, None), (0, None)]
    assert check.stage_problem(stage, outcomes[1].values) == []
