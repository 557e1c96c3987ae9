"""The tutorial's printed numbers, reproduced through the Python API and the command line."""
import json

import numpy as np

from attnlab.core.training import train
from attnlab.core.walkthrough import walkthrough

from conftest import GOLDEN_EMBEDDING_ROWS, GOLDEN_SECTION5, TUTORIAL_IDS, compose_cfg


def test_section5_losses_and_journey_rows(cfg_of):
    result = train(cfg_of())
    assert result.status == "completed"
    assert result.steps_run == 201
    assert len(result.losses) == 201
    assert [s.step for s in result.snapshots] == list(GOLDEN_SECTION5)
    for snap in result.snapshots:
        loss, row = GOLDEN_SECTION5[snap.step]
        assert f"{snap.loss:.4f}" == f"{loss:.4f}"
        assert [f"{v:.2f}" for v in snap.weights[0, 1]] == [f"{v:.2f}" for v in row]
        assert snap.weights.shape == (1, 6, 6)
        np.testing.assert_allclose(snap.weights.sum(-1), 1.0, atol=1e-6)
    assert f"{result.losses[0]:.4f}" == "2.3566"  # as §5 prints it
    assert result.steps_to_threshold == 94  # train.loss_threshold = 1e-3


def test_walkthrough_sections_1_to_4(cfg_of, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    lines: list[str] = []
    arrays = walkthrough(cfg_of("experiment=tutorial_walkthrough"), print_line=lines.append)
    out = "\n".join(lines) + "\n"
    assert list(tmp_path.iterdir()) == []  # it writes nothing
    assert all("\n" not in line for line in lines)  # one line per call
    assert arrays["token_ids"].tolist() == TUTORIAL_IDS
    assert [[f"{v:.4f}" for v in row] for row in arrays["token_embeddings"][:3]] == \
        [[f"{v:.4f}" for v in row] for row in GOLDEN_EMBEDDING_ROWS]
    assert np.all(arrays["weights"].round(3) == 0.167)
    assert arrays["Q"].shape == (6, 4)
    assert arrays["V"].shape == (6, 4)
    assert arrays["Z"].shape == (6, 4)
    assert "token_ids: [7120, 7002, 4940, 351, 530, 2239]" in out
    assert "[[-0.0089 -0.0162  0.0229  0.0074  0.0064  0.0093]" in out
    assert "lookup == Embedding call? True" in out
    assert "row sums: [1. 1. 1. 1. 1. 1.]" in out
    assert out.count("0.167") == 36
    assert "\nshape: (6, 6)\n" in out  # the positional embedding's shape, no trailing space
    assert [line for line in out.splitlines() if line != line.rstrip()] == []


def test_cli_default_run_prints_tutorial_lines_and_writes_artifacts(default_cli_run):
    run_dir, proc = default_cli_run
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("step")]
    assert lines[0] == ("step   0  loss=2.3566  |  ' journey' attends: 'Your'=0.22 'journey'=0.12 "
                        "'starts'=0.13 'with'=0.14 'one'=0.19 'step'=0.21")
    assert [line[:24] for line in lines] == ["step   0  loss=2.3566  |", "step  20  loss=0.2104  |",
                                       "step  50  loss=0.0465  |", "step 100  loss=0.0005  |",
                                       "step 200  loss=0.0000  |"]
    assert lines[-1].endswith("'Your'=0.99 'journey'=0.00 'starts'=0.00 'with'=0.00 'one'=0.00 'step'=0.00")
    metrics = (run_dir / "metrics.csv").read_text().splitlines()
    assert metrics[0] == "step,loss"
    assert len(metrics) == 202
    step, loss = metrics[1].split(",")
    assert step == "0" and f"{float(loss):.4f}" == "2.3566"
    with np.load(run_dir / "attention.npz") as npz:
        assert npz["steps"].tolist() == [0, 20, 50, 100, 200]
        assert npz["weights"].shape == (5, 1, 6, 6)
        assert npz["tokens"].tolist() == ["Your", " journey", " starts", " with", " one", " step"]
        assert npz["token_ids"].tolist() == TUTORIAL_IDS
        assert f"{npz['weights'][4, 0, 1, 0]:.2f}" == "0.99"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert summary["steps_run"] == 201
    assert summary["error"] is None
    assert summary["final_loss"] == float(metrics[-1].split(",")[1])
    assert summary["versions"]["torch"].startswith("2.")
    assert summary["versions"]["tiktoken"]
    assert (run_dir / ".hydra" / "config.yaml").is_file()


def test_cli_walkthrough_writes_walkthrough_npz(attnlab_here, tmp_path):
    proc = attnlab_here("experiment=tutorial_walkthrough", f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    with np.load(tmp_path / "walkthrough.npz") as npz:
        assert set(npz.files) == {"token_ids", "token_embeddings", "pos_embeddings", "X", "Q", "K", "V",
                                  "scores", "weights", "Z"}
        assert [f"{v:.4f}" for v in npz["token_embeddings"][0]] == [f"{v:.4f}" for v in GOLDEN_EMBEDDING_ROWS[0]]
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "completed"


def test_cli_logging_switches(attnlab_here, tmp_path, default_cli_run):
    (on, on_proc), off = default_cli_run, tmp_path / "off"
    assert on_proc.returncode == 0
    names = sorted(p.name for p in on.iterdir())
    assert "attention_evolution.png" in names
    assert "loss.png" in names
    assert any(n.startswith("events.out.tfevents.") for n in names)
    assert compose_cfg("logging=off").logging.console is True  # logging=off keeps the console lines
    proc = attnlab_here(f"hydra.run.dir={off}", "logging=off", "logging.console=false")
    assert proc.returncode == 0
    assert proc.stdout == ""
    assert proc.stderr == ""
    assert sorted(p.name for p in off.iterdir()) == [".hydra", "attention.npz", "metrics.csv", "summary.json"]
    # the records are the same whatever is logged
    assert (on / "metrics.csv").read_bytes() == (off / "metrics.csv").read_bytes()
    # logging.images=false: TensorBoard without heatmaps (what it writes: test_tensorboard.test_no_images_option)
    from attnlab.commands.job import make_sinks

    sinks = make_sinks(compose_cfg("logging.images=false"), tmp_path / "no_images")
    assert [s.images for s in sinks if type(s).__name__ == "TensorBoardSink"] == [False]
    assert any(type(s).__name__ == "FigureSink" for s in sinks)
