"""The model variants as runs: config keys through training, records per head, focus
metrics in summary.json and the sweep table, the presets. The model's own maths is tested in
test_model.py and test_model_variants.py."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from attnlab.commands.job import run_job
from attnlab.core.focus import FocusSink
from attnlab.core.training import train
from attnlab.saved.columns import observed_cells

from conftest import compose_cfg

SHORT = ("logging=off", "train.steps=30", "train.snapshot_steps=[0,10,29]")


def test_defaults_are_the_tutorial_and_every_switch_is_off():
    cfg = compose_cfg()
    assert (cfg.model.n_heads, cfg.model.causal, cfg.model.dropout, cfg.model.qkv_bias) == (1, False, 0.0, False)
    assert (cfg.model.attention, cfg.model.out_proj, cfg.train.objective) == ("explicit", "auto", "mse")


def test_heads_preset_keeps_the_totals():
    for heads, d_k, d_v in ((1, 4, 6), (2, 2, 3), (4, 1, 1)):
        cfg = compose_cfg("experiment=heads", f"model.n_heads={heads}")
        assert (cfg.model.d_k, cfg.model.d_v) == (d_k, d_v), heads


def test_snapshots_hold_every_head():
    result = train(compose_cfg(*SHORT, "model.n_heads=3", "model.d_k=2"))
    assert [s.weights.shape for s in result.snapshots] == [(3, 6, 6)] * 3
    for snap in result.snapshots:
        np.testing.assert_allclose(snap.weights.sum(-1), 1.0, atol=1e-6)
    assert not np.array_equal(result.snapshots[-1].weights[0], result.snapshots[-1].weights[1])


def test_causal_run_records_exact_zeros_above_the_diagonal():
    result = train(compose_cfg(*SHORT, "model.causal=true"))
    for snap in result.snapshots:
        assert np.all(np.triu(snap.weights[0], k=1) == 0.0)
    assert result.snapshots[0].weights[0, 0, 0] == 1.0  # the first token sees only itself


def test_dropout_runs_are_bitwise_reproducible_and_differ_from_no_dropout():
    a = train(compose_cfg(*SHORT, "model.dropout=0.3"))
    b = train(compose_cfg(*SHORT, "model.dropout=0.3"))
    plain = train(compose_cfg(*SHORT))
    assert a.losses.tobytes() == b.losses.tobytes()
    assert a.losses[0] == plain.losses[0] or a.losses[1] != plain.losses[1]  # masks change the updates
    assert not np.array_equal(a.losses, plain.losses)
    for snap in a.snapshots:  # recorded without dropout: rows still sum to 1
        np.testing.assert_allclose(snap.weights.sum(-1), 1.0, atol=1e-6)


@pytest.mark.parametrize("causal", ["false", "true"])
def test_sdpa_trains_like_the_explicit_path_for_ten_steps(causal):
    ten = ("logging=off", "train.steps=10", "train.snapshot_steps=[0,9]", f"model.causal={causal}")
    explicit = train(compose_cfg(*ten))
    sdpa = train(compose_cfg(*ten, "model.attention=sdpa"))
    np.testing.assert_allclose(sdpa.losses, explicit.losses, rtol=0, atol=1e-5)
    for a, b in zip(sdpa.snapshots, explicit.snapshots):
        np.testing.assert_allclose(a.weights, b.weights, rtol=0, atol=1e-5)


def test_next_token_objective_starts_near_ln_vocab_and_learns():
    result = train(compose_cfg(*SHORT, "train.objective=next_token"))
    assert abs(result.losses[0] - math.log(50257)) < 0.05  # a near-uniform guess over GPT-2's vocabulary
    assert result.losses[-1] < 2.0


def test_focus_metrics_reproduce_the_tutorials_observation(tmp_path):
    cfg = compose_cfg("logging=off")
    assert run_job(cfg, tmp_path).status == "completed"
    focus = json.loads((tmp_path / "summary.json").read_text(encoding="utf-8"))["focus"]
    assert focus["token"] == " journey"
    assert focus["step"] == 200
    assert focus["mean"]["token"] == "Your"
    assert round(focus["mean"]["weight"], 2) == 0.99
    assert focus["mean"]["first_step_above"] == 100  # 0.84 at step 50, 0.99 at step 100
    assert focus["heads"] == [focus["mean"]]
    assert np.array(focus["entropy_nats"]).shape == (1, 6)
    assert focus["upper_triangle_max"] > 0.5  # without the mask the future gets weight
    columns = observed_cells(json.loads((tmp_path / "summary.json").read_text(encoding="utf-8")))
    assert columns["focus_step"] == 100
    assert "heads_focus" not in columns
    assert "upper_max" not in columns


def test_focus_sink_per_head_and_first_step_above():
    from attnlab.core.records import RunInfo, Snapshot

    sink = FocusSink()
    sink.on_start(RunInfo(config={}, token_ids=[1, 2, 3], tokens=["a", "b", "c"], snapshot_steps=[0, 5],
                          steps=6, focus_token=1))
    uniform = np.full((2, 3, 3), 1 / 3)
    focused = uniform.copy()
    focused[0, 1] = [0.05, 0.05, 0.9 + 1e-3]
    focused[1, 1] = [0.2, 0.7, 0.1]
    sink.on_snapshot(Snapshot(0, 1.0, uniform))
    sink.on_snapshot(Snapshot(5, 0.5, focused))
    summary = sink.summary()["focus"]
    assert [(h["token"], round(h["weight"], 3), h["first_step_above"]) for h in summary["heads"]] == [
        ("c", 0.901, 5), ("b", 0.7, None)]
    assert summary["mean"]["token"] == "c"
    assert summary["mean"]["first_step_above"] is None  # mean weight (0.901 + 0.1) / 2 ≈ 0.5
    assert summary["upper_triangle_max"] == pytest.approx(0.901)


def test_variants_print_their_answer_in_the_sweep_table(attnlab_here, tmp_path):
    sweep = tmp_path / "heads"
    proc = attnlab_here("experiment=heads", f"hydra.sweep.dir={sweep}", "logging=off", "train.steps=60")
    assert proc.returncode == 0, proc.stderr
    header = next(line for line in proc.stdout.splitlines() if line.startswith("job "))
    assert "each head looks at" in header
    assert "first >0.9 at step" in header
    rows = [line for line in proc.stdout.splitlines() if line.startswith(("0_", "1_", "2_"))]
    assert len(rows) == 3
    assert "0:" in rows[1]
    assert "1:" in rows[1]
    assert "3:" in rows[2]
    summaries = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(sweep.glob("*/summary.json"))]
    assert [len(s["focus"]["heads"]) for s in summaries] == [1, 2, 4]
    assert [s["config"]["model"]["d_k"] for s in summaries] == [4, 2, 1]


def test_console_shows_the_head_mean_and_each_heads_strongest_key():
    import io

    from attnlab.outputs.console import ConsoleSink

    out = io.StringIO()
    train(compose_cfg("logging=off", "train.steps=5", "train.snapshot_steps=[4]", "model.n_heads=2"),
          [ConsoleSink(progress=False, file=out)])
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("step   4  loss=")
    assert lines[1].startswith("          2 heads, strongest key each: 0→'")
    assert " 1→'" in lines[1]


def test_a_dropout_run_reproduces_bit_for_bit_and_says_why(tmp_path, capsys):
    """A run made in-process with its config saved as Hydra saves it."""
    from omegaconf import OmegaConf

    from attnlab.commands.reproduce import main

    run = tmp_path / "run"
    cfg = compose_cfg(*SHORT, "model.dropout=0.2", "logging.console=false")
    assert run_job(cfg, run).status == "completed"
    (run / ".hydra").mkdir()
    OmegaConf.save(cfg, run / ".hydra" / "config.yaml")
    assert main([str(run), "--out", str(tmp_path / "again")]) == 0
    seen = capsys.readouterr()
    assert seen.out.splitlines()[0] == "reproduced exactly"
    assert "note: model.dropout=0.2: the dropout masks are drawn from seed=42" in seen.err


def test_heads_get_their_own_tensorboard_tags_and_figure_row(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from attnlab.core.focus import focus
    from attnlab.outputs import artifacts
    from attnlab.outputs.plots import FigureSink
    from attnlab.outputs.tensorboard import TensorBoardSink

    cfg = compose_cfg("train.steps=30", "train.snapshot_steps=[0,10,29]", "model.n_heads=2", "model.d_k=2")
    result = train(cfg, [artifacts.RunDirSink(tmp_path), TensorBoardSink(tmp_path, images=True),
                         FigureSink(tmp_path)], run_dir=tmp_path)
    acc = EventAccumulator(str(tmp_path), size_guidance={"images": 0, "scalars": 0})
    acc.Reload()
    assert {"attention/weights", "attention/weights/head_0", "attention/weights/head_1"} <= set(acc.Tags()["images"])
    assert [e.step for e in acc.Images("attention/weights/head_1")] == [0, 10, 29]
    for h in range(2):
        expected = [float(focus(s.weights, 1).weight[h]) for s in result.snapshots]
        assert [e.value for e in acc.Scalars(f"focus/weight/head_{h}")] == pytest.approx(expected, rel=1e-6)
    assert "attention/entropy/head_1/0_Your" in acc.Tags()["scalars"]
    png = (tmp_path / "attention_evolution.png").read_bytes()
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (width, height) == (2 * 340 + 90, 3 * 360 + 50)  # a row of 2 heads for each of the 3 snapshots


def test_the_loss_is_named_by_the_objective_in_every_figure_and_page(tmp_path):
    """``train.objective=next_token`` trains on cross-entropy (nats): loss.png's axis, the
    compare figure's and the report's loss cards say so; MSE runs keep "loss (MSE)", a mix (or
    an objective attnlab does not have) says only "loss"."""
    from attnlab.core.config import loss_axis_label, loss_name
    from attnlab.outputs import plots
    from attnlab.saved import compare_figure, report_data, runs

    assert [loss_name(o) for o in (["mse"], [None], ["next_token"], ["mse", None], ["mse", "next_token"],
                                   ["evil"], [3], [])] == \
        ["MSE", "MSE", "cross-entropy, nats", "MSE", None, None, None, None]
    assert loss_axis_label(["next_token"]) == "loss (cross-entropy, nats)" and loss_axis_label(["x"]) == "loss"
    runs_made = {}
    for objective in ("mse", "next_token"):
        run = tmp_path / objective
        cfg = compose_cfg("train.steps=30", "train.snapshot_steps=[0,10,29]", f"train.objective={objective}",
                          "logging.tensorboard=false", "logging.report=false", "logging.console=false")
        assert run_job(cfg, run).status == "completed"
        runs_made[objective] = run
    losses = {o: np.loadtxt(r / "metrics.csv", delimiter=",", skiprows=1)[:, 1] for o, r in runs_made.items()}
    ce = plots.png(plots.loss_figure, losses["next_token"], "loss (cross-entropy, nats)")
    assert (runs_made["next_token"] / "loss.png").read_bytes() == ce
    assert (runs_made["mse"] / "loss.png").read_bytes() == plots.png(plots.loss_figure, losses["mse"])
    assert ce != plots.png(plots.loss_figure, losses["next_token"])  # the label is drawn

    rows = {o: runs.job_row(r) for o, r in runs_made.items()}
    assert (rows["mse"]["objective"], rows["next_token"]["objective"]) == ("mse", "next_token")
    labels = []
    real = compare_figure.plot_loss
    compare_figure.plot_loss = lambda ax, steps, values, ylabel, **kw: labels.append(ylabel) or real(
        ax, steps, values, ylabel, **kw)
    try:
        for chosen in (["mse"], ["next_token"], ["mse", "next_token"]):
            labels.clear()
            compare_figure.comparison_figure([rows[o] for o in chosen], tmp_path / "cmp.png")
            assert set(labels) == {loss_axis_label(chosen)}, chosen
    finally:
        compare_figure.plot_loss = real
    records = {o: report_data.load_run(r) for o, r in runs_made.items()}
    assert (records["mse"]["loss_name"], records["next_token"]["loss_name"]) == ("MSE", "cross-entropy, nats")

    # a run dir edited by someone: summary.json's config decides for both tools (the config the run
    # used; .hydra/config.yaml still says mse), and a value that is no objective names nothing
    run = runs_made["mse"]
    summary = json.loads((run / "summary.json").read_text())
    for value, name in (("next_token", "cross-entropy, nats"), (5, None), (["next_token"], None), ("evil", None)):
        summary["config"]["train"]["objective"] = value
        (run / "summary.json").write_text(json.dumps(summary))
        assert loss_name([runs.job_row(run)["objective"]]) == name, value
        assert report_data.load_run(run)["loss_name"] == name, value


def _focus_summary_restated(snapshots, query, tokens, threshold=0.9):
    """FocusSink's summary restated independently, numpy only: each snapshot's whole (H, T, T)
    as float64 with the head mean appended."""
    series, last = [], None
    for s in snapshots:
        w = np.asarray(s.weights, dtype=np.float64)
        last = np.concatenate([w, w.mean(axis=0, keepdims=True)])
        row = last[:, query, :]
        series.append(row[np.arange(row.shape[0]), row.argmax(-1)])
    series = np.stack(series)
    row = last[:, query, :]
    keys = row.argmax(-1)
    entries = []
    for h, key in enumerate(keys):
        above = [s.step for s, v in zip(snapshots, series[:, h]) if v > threshold]
        entries.append({"key": int(key), "token": tokens[key], "weight": float(row[h, key]),
                        "uniform": bool(row[h].max() - row[h].min() < 5e-4),
                        "first_step_above": above[0] if above else None})
    heads = last[:-1]
    entropy = -(heads * np.log(np.where(heads > 0, heads, 1.0))).sum(-1)
    upper = np.triu(np.ones(heads.shape[-2:], dtype=bool), k=1)
    return {"query": query, "token": tokens[query], "threshold": threshold, "step": snapshots[-1].step,
            "heads": entries[:-1], "mean": entries[-1], "entropy_nats": np.round(entropy, 6).tolist(),
            "upper_triangle_max": float(heads[:, upper].max()) if upper.any() else 0.0}


@pytest.mark.parametrize("heads, T", [(1, 1), (1, 6), (2, 5), (3, 7), (8, 9), (16, 4), (4, 64)])
def test_focus_sink_reads_the_focus_row_as_the_whole_weights_gave(heads, T):
    """FocusSink converts only the focus token's row of each snapshot (a (1024, 1024) snapshot
    is 8 MB as float64): its summary is, value for value, what the whole weights gave."""
    from attnlab.core.records import RunInfo, Snapshot

    rng = np.random.default_rng(heads * 1000 + T)
    tokens = [f"t{i}" for i in range(T)]
    for query in sorted({0, T // 2, T - 1}):
        snaps = [Snapshot(step, 1.0 / (step + 1), rng.dirichlet(np.full(T, 0.3), size=(heads, T)).astype(np.float32))
                 for step in (0, 3, 10, 40)]
        sink = FocusSink()
        sink.on_start(RunInfo(config={}, token_ids=list(range(T)), tokens=tokens, snapshot_steps=[s.step for s in snaps],
                              steps=41, focus_token=query))
        for snap in snaps:
            sink.on_snapshot(snap)
        assert sink.summary()["focus"] == _focus_summary_restated(snaps, query, tokens)
        before = sink.summary()
        snaps[-1].weights[...] = 0.5  # the caller changes its array afterwards: the summary keeps its copy
        assert sink.summary() == before
    with pytest.raises(ValueError, match=r"^snapshot weights must be \(H, T, T\), got shape \(" + f"{T}, {T}" + r"\)$"):
        FocusSink().on_snapshot(Snapshot(0, 1.0, np.full((T, T), 1.0 / T)))  # a (T, T) without its head axis
    outside = FocusSink()  # a focus token past the text: the error focus() gives
    outside.on_start(RunInfo(config={}, token_ids=list(range(T)), tokens=tokens, snapshot_steps=[0], steps=1,
                             focus_token=T))
    with pytest.raises(ValueError, match=rf"^query={T}: must be a position in \[0, {T}\)$"):
        outside.on_snapshot(snaps[0])
