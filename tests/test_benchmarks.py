"""The benchmark harness (``benchmarks/``) measures attnlab against the tutorial's own code on the
same config and the same tokens. Nothing here is timed."""
from __future__ import annotations

import inspect
import re
import sys

from attnlab.core import config, tokenizer

from conftest import GOLDEN_SECTION5, ROOT, TUTORIAL_IDS, compose_cfg

sys.path.insert(0, str(ROOT))  # benchmarks/ is not an installed package
from benchmarks import child, plain_tutorial, run  # noqa: E402


def test_plain_script_prints_the_tutorials_numbers(capsys):
    plain_tutorial.main([])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(GOLDEN_SECTION5)
    for line, (step, (loss, row)) in zip(lines, GOLDEN_SECTION5.items()):
        assert line.startswith(f"step {step:3d}  loss={loss:.4f}  |")
        assert [float(x) for x in re.findall(r"=(\d\.\d\d)", line.split("|")[1])] == row


def test_plain_script_runs_attnlabs_default_config():
    cfg = config.apply_schema(compose_cfg())
    defaults = {name: p.default for name, p in inspect.signature(plain_tutorial.train).parameters.items()}
    assert (cfg.model.d_model, cfg.model.d_k, cfg.model.d_v) == (defaults["d_model"], defaults["d_out"], defaults["d_model"])
    assert (cfg.train.steps, tokenizer.tokenize(cfg).focus) == (defaults["steps"], defaults["focus"])
    assert config.snapshot_steps(cfg.train) == list(defaults["snapshot_steps"])
    assert (cfg.seed, cfg.model.init_std, cfg.optimizer._target_, cfg.optimizer.lr) == (42, 1.0, "torch.optim.Adam", 0.05)
    assert (cfg.model.n_heads, cfg.model.causal, cfg.model.dropout, cfg.model.qkv_bias) == (1, False, 0.0, False)
    assert (cfg.model.positional.name, cfg.train.objective.name) == ("learned", "mse")
    assert cfg.sentence == plain_tutorial.SENTENCE


def test_plain_script_tokenizes_like_attnlab():
    enc = plain_tutorial.gpt2_encoding()
    assert enc.encode(plain_tutorial.SENTENCE) == TUTORIAL_IDS
    text = run.text_with_tokens(100)
    assert enc.encode(text) == tokenizer.encode(text)


def test_scaling_children_train_the_same_model(tmp_path):
    """The scaling case's two loops (d_k = d_v = d_model on a generated text) end on the same loss."""
    text = tmp_path / "text.txt"
    text.write_text(run.text_with_tokens(16), encoding="utf-8")
    assert child.snapshot_steps(201) == [0, 50, 100, 150, 200]
    plain = child.run_plain(str(text), 8, 40)
    ours = child.run_attnlab(str(text), 8, 40, str(tmp_path / "run"))
    assert ours["status"] == plain["status"] == "completed"
    assert f"{ours['final_loss']:.4f}" == f"{plain['final_loss']:.4f}"


def test_results_replace_only_the_marked_block(tmp_path):
    out = tmp_path / "bench.md"
    out.write_text(f"# notes before\n\n{run.BEGIN}\nold table\n{run.END}\n## analysis after\n", encoding="utf-8")
    run.write_out(out, f"{run.BEGIN}\nnew table\n{run.END}")
    text = out.read_text(encoding="utf-8")
    assert "new table" in text and "old table" not in text
    assert text.startswith("# notes before") and text.rstrip().endswith("## analysis after")


def test_gpt_benchmark_stands_alone(tmp_path):
    """benchmarks/gpt.py runs from any folder with attnlab and torch only (no tests/, no pytest) and prints
    its table row: steps/s of attnlab's mini-GPT loop and of the plain loop, and their ratio."""
    import subprocess

    sizes = [a for kv in ("n_layers=1", "d_model=16", "n_heads=2", "context=16") for a in ("--size", kv)]
    done = subprocess.run([sys.executable, "-X", "importtime", str(ROOT / "benchmarks" / "gpt.py"), "--steps", "2",
                           "--reps", "1", "--device", "cpu", *sizes], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {line.split("|")[-1].strip().split(".")[0] for line in done.stderr.splitlines() if "|" in line}
    assert "torch" in imported and "attnlab" in imported
    assert not imported & {"pytest", "conftest", "tests"}
    row = done.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"\| cpu \(\d+ threads?\) \| \{'n_layers': 1, 'd_model': 16, 'n_heads': 2, 'context': 16, "
                        r"'batch_size': 1\} \| \d+\.\d\d \| \d+\.\d\d \| \d\.\d{3} \|", row), row


def test_the_classroom_benchmark_checks_every_verdict(tmp_path):
    """benchmarks/classroom.py fails a repetition unless every student's verdict is the expected one
    and the rows are sorted by student."""
    import csv

    from benchmarks import classroom

    def table(rows) -> object:
        path = tmp_path / "v.csv"
        with path.open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, ["job", "name", "verdict", "differs", "reproduction"])
            writer.writeheader()
            writer.writerows(rows)
        return path

    right = [{"job": n, "name": n, "verdict": classroom.expected(n)[0], "differs": classroom.expected(n)[1] or ""}
             for n in classroom.NAMES]
    assert classroom.check(table(right)) == []
    assert classroom.expected(classroom.EDITED) == ("not reproduced", "loss")
    wrong = [dict(r, verdict="within rounding") if r["name"] == classroom.EDITED else r for r in right]
    assert classroom.check(table(wrong)) == [f"{classroom.EDITED}: within rounding (loss)"]
    assert classroom.check(table(right[::-1]))[-1].startswith("rows not sorted by student")
