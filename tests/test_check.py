"""attnlab-check: a learner's own tutorial §2–4 against the tutorial's numbers, in-process."""
import numpy as np
import pytest

from attnlab.commands import check

from conftest import GOLDEN_EMBEDDING_ROWS

# The tutorial's own lines (§2 token_emb_layer(torch.tensor(token_ids)), §3 X = token_embeddings +
# pos_embeddings, §4.1–4.4), put into the template's six functions as a learner would.
TUTORIAL = '''
import torch


def embed_tokens(token_ids, token_emb_layer):
    token_embeddings = token_emb_layer(torch.tensor(token_ids))
    return token_embeddings


def add_positions(token_embeddings, pos_emb_layer):
    seq_len = token_embeddings.shape[0]
    pos_embeddings = pos_emb_layer(torch.arange(seq_len))
    X = token_embeddings + pos_embeddings
    return X


def project_qkv(X, W_query, W_key, W_value):
    Q = W_query(X)
    K = W_key(X)
    V = W_value(X)
    return Q, K, V


def attention_scores(Q, K):
    attn_scores = Q @ K.T
    d_k = K.shape[-1]
    attn_scores_scaled = attn_scores / d_k ** 0.5
    return attn_scores_scaled


def attention_weights(attn_scores_scaled):
    attn_weights = torch.softmax(attn_scores_scaled, dim=-1)
    return attn_weights


def context_vectors(attn_weights, V):
    Z = attn_weights @ V
    return Z
'''
# the same math written otherwise: by hand, in float64, in place, numpy out
OTHERWISE = '''
import torch
import torch.nn.functional as F


def embed_tokens(token_ids, token_emb_layer):
    return token_emb_layer.weight[token_ids].double()


def add_positions(token_embeddings, pos_emb_layer):
    token_embeddings += pos_emb_layer.weight[: len(token_embeddings)]
    return token_embeddings.detach().numpy()


def project_qkv(X, W_query, W_key, W_value):
    return [torch.einsum("td,kd->tk", X, W.weight) for W in (W_query, W_key, W_value)]


def attention_scores(Q, K):
    return torch.matmul(Q.double(), K.double().transpose(0, 1)) / Q.shape[1] ** 0.5


def attention_weights(attn_scores_scaled):
    e = torch.exp(attn_scores_scaled - attn_scores_scaled.max(dim=1, keepdim=True).values)
    return e / e.sum(dim=1, keepdim=True)


def context_vectors(attn_weights, V):
    return F.linear(attn_weights, V.T)
'''


def run(tmp_path, capsys, source, *argv):
    path = tmp_path / "mine.py"
    path.write_text(source, encoding="utf-8")
    status = check.main([*argv, str(path)])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.parametrize("source", [TUTORIAL, OTHERWISE], ids=["tutorial", "otherwise"])
def test_correct_code_passes_every_stage(tmp_path, capsys, source):
    status, out, err = run(tmp_path, capsys, source)
    assert (status, err) == (0, "")
    assert out.splitlines() == [
        "stage 1/6 §2 token embedding, embed_tokens(): passed",
        "stage 2/6 §3 positional embedding, add_positions(): passed",
        "stage 3/6 §4.1 Q, K, V, project_qkv(): passed",
        "stage 4/6 §4.2 scaled attention scores, attention_scores(): passed",
        "stage 5/6 §4.3 softmax: attention weights, attention_weights(): passed",
        "stage 6/6 §4.4 context vectors Z, context_vectors(): passed",
        "all 6 stages match the tutorial's numbers"]


MISTAKES = [  # (the tutorial's line, the learner's, the stage that differs, the likely mistake printed)
    ("attn_scores / d_k ** 0.5", "attn_scores", 4, "not scaled by √d_k: divide Q @ K.T by d_k ** 0.5"),
    ("dim=-1", "dim=0", 5, "softmax over the wrong axis (dim=0: each column sums to 1); use dim=-1, each row"),
    ("X = token_embeddings + pos_embeddings", "X = token_embeddings", 2,
     "positions not added: X = token_embeddings + pos_emb_layer(torch.arange(seq_len))"),
    ("Q = W_query(X)", "Q = W_key(X)", 3, "K instead of Q: Q = W_query(X)"),
    ("V = W_value(X)", "V = W_query(X)", 3, "Q instead of V: V = W_value(X)"),
    ("Q @ K.T", "K @ Q.T", 4, "K @ Q.T, not Q @ K.T (the scores transposed)"),
    ("d_k = K.shape[-1]", "d_k = 6", 4, "divided by √6 (d_model or seq_len), not by √d_k = √4"),
    ("Z = attn_weights @ V", "Z = attn_weights.T @ V", 6, "the weights transposed: attn_weights.T @ V"),
    ("token_emb_layer(torch.tensor(token_ids))", "token_emb_layer.weight[:6]", 1,
     "the first seq_len rows of the table, not the rows of token_ids"),
    ("torch.softmax(attn_scores_scaled, dim=-1)", "torch.exp(attn_scores_scaled)", 5,
     "exp(scores) not divided by each row's sum"),
    # an error the learner's code raises, and what it usually means
    ("token_emb_layer(torch.tensor(token_ids))", "token_emb_layer(torch.tensor(token_ids, dtype=torch.float))", 1,
     "token ids as floats; Embedding uses each id as a row number, which must be an integer: "
     "torch.tensor(token_ids) (int64), not dtype=torch.float (tutorial §2, 新手常见报错)"),
    ("Q @ K.T", "Q @ K", 4, "Q @ K multiplies two (seq_len, d_k) matrices; the scores are Q @ K.T, K transposed to "
     "(d_k, seq_len) (tutorial §4.2)"),
]


@pytest.mark.parametrize("line, wrong, stage, mistake", MISTAKES, ids=[m[1] for m in MISTAKES])
def test_a_typical_mistake_is_named_at_its_stage(tmp_path, capsys, line, wrong, stage, mistake):
    assert line in TUTORIAL
    status, out, err = run(tmp_path, capsys, TUTORIAL.replace(line, wrong))
    assert (status, err) == (1, "")
    lines = out.splitlines()
    assert [s[:9] for s in lines if s.endswith(": passed")] == [f"stage {n}/6" for n in range(1, stage)]
    assert lines[stage - 1].startswith(f"stage {stage}/6 ") and lines[stage - 1].endswith(": differs")
    assert f"  likely mistake: {mistake}" in lines
    assert lines[-1] == "fix this stage and run attnlab-check again: the stages after it are checked once it passes"


def test_expected_vs_got_and_an_unknown_mistake(tmp_path, capsys):
    status, out, _ = run(tmp_path, capsys, TUTORIAL.replace("return Z", "return Z.double() * 1.01"))
    assert status == 1
    Z = check.reference()[0]["Z"].astype(np.float64)
    i = np.unravel_index(np.abs(Z).argmax(), Z.shape)  # where 1 % makes the largest difference
    assert out.splitlines()[5:10] == [
        "stage 6/6 §4.4 context vectors Z, context_vectors(): differs",
        "  Z: expected (6, 4) [" + " ".join(f"{v:.6g}" for v in Z.reshape(-1)[:6]) + " ...]",
        "     got      (6, 4) [" + " ".join(f"{v:.6g}" for v in (Z * 1.01).reshape(-1)[:6]) + " ...]",
        f"  largest difference at [{i[0]}, {i[1]}]: expected {Z[i]:.6g}, got {Z[i] * 1.01:.6g}",
        "  likely mistake: none of the usual ones; compare your code with the tutorial's lines"]


def test_every_mistake_differs_from_the_reference_beyond_the_tolerance():
    for stage in check.stages():
        for _name, want, mistakes in stage.outputs:
            assert check.close(want.double().numpy(), want)
            for text, wrong in mistakes:
                assert not check.close(wrong.double().numpy(), want), text
                assert check.close(wrong.double().numpy() * (1 + check.TOLERANCE / 10), wrong)


def test_template_fails_at_stage_1_and_is_never_written_over(tmp_path, capsys):
    path = tmp_path / "mine.py"
    assert check.main(["--template", str(path)]) == 0
    assert path.read_text(encoding="utf-8") == check.TEMPLATE.read_text(encoding="utf-8")
    assert "形状 / shapes" in path.read_text(encoding="utf-8")
    assert check.main([str(path)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"wrote {path}: fill in the six functions, then run attnlab-check {path}",
        "stage 1/6 §2 token embedding, embed_tokens(): differs",
        "  embed_tokens() is not written yet: it raises NotImplementedError (mine.py, line 24)",
        "fix this stage and run attnlab-check again: the stages after it are checked once it passes"]
    path.write_text("mine", encoding="utf-8")
    assert check.main(["--template", str(path)]) == 2
    assert capsys.readouterr().err == f"attnlab-check: error: --template {path}: exists; attnlab writes a new file only\n"
    assert path.read_text(encoding="utf-8") == "mine"


@pytest.mark.parametrize("source, line", [
    (None, "mine.py cannot be loaded: FileNotFoundError: no such file"),
    ("def f(:\n", "mine.py, line 1: SyntaxError: invalid syntax"),
    ("import torch\nimport no_such_module_here\n",
     "mine.py cannot be loaded: ModuleNotFoundError: No module named 'no_such_module_here' (mine.py, line 2)"),
    ("raise SystemExit(3)\n", "mine.py cannot be loaded: SystemExit: 3 (mine.py, line 1)"),
])
def test_a_file_that_cannot_be_loaded_exits_2(tmp_path, capsys, monkeypatch, source, line):
    monkeypatch.chdir(tmp_path)
    if source is not None:
        (tmp_path / "mine.py").write_text(source, encoding="utf-8")
    assert check.main(["mine.py"]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"attnlab-check: error: {line}\n")


def test_stage_faults_are_one_line_each(tmp_path, capsys):
    status, out, _ = run(tmp_path, capsys, TUTORIAL.replace("return Q, K, V", "return Q, K"))
    assert status == 1 and "  project_qkv() must return 3 values (Q, K, V), it returned 2" in out
    status, out, _ = run(tmp_path, capsys, TUTORIAL.replace("Z = attn_weights @ V", "Z = V @ attn_weights"))
    line = TUTORIAL.splitlines().index("    Z = attn_weights @ V") + 1
    fault = [s for s in out.splitlines() if s.startswith("  context_vectors() raised RuntimeError: ")]
    assert status == 1 and len(fault) == 1 and fault[0].endswith(f" (mine.py, line {line})")  # torch's words between
    status, out, _ = run(tmp_path, capsys, TUTORIAL.replace("def context_vectors", "def context"))
    assert status == 1 and "  mine.py has no function context_vectors(); " in out


def test_help_says_it_runs_the_learners_file(capsys):
    with pytest.raises(SystemExit):
        check.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "It imports and runs FILE.py, your own code, as pytest would" in text
    assert "Teachers verify students' run dirs with attnlab-reproduce, never their code." in text


def test_the_reference_is_made_before_the_learners_file_changes_torchs_defaults(tmp_path, capsys):
    import torch

    check.reference.cache_clear()
    try:
        status, out, _ = run(tmp_path, capsys, "import torch\ntorch.set_default_dtype(torch.float64)\n" + TUTORIAL)
        assert status == 0, out
        tok = check.reference()[0]["token_embeddings"]  # the tutorial's: float32, its printed first row
        assert tok.dtype == np.float32 and [f"{v:.4f}" for v in tok[0]] == [f"{v:.4f}" for v in GOLDEN_EMBEDDING_ROWS[0]]
    finally:
        torch.set_default_dtype(torch.float32)
