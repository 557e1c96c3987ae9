"""attnlab.outputs.tensorboard: what the event file holds, read back with TensorBoard's own reader and
served by a real ``tensorboard`` process over its HTTP data API."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorboard")
pytest.importorskip("torch.utils.tensorboard")

from attnlab.core.focus import row_entropy as entropy  # noqa: E402
from attnlab.core.records import RunInfo, RunResult, Snapshot  # noqa: E402
from attnlab.outputs.tensorboard import TensorBoardSink, flatten_config, tag_names  # noqa: E402

TOKENS = ["Your", " journey", " starts", " with", " one", " step"]
TOKEN_IDS = [7120, 7002, 4940, 351, 530, 2239]
SNAPSHOT_STEPS = [0, 20, 50, 100, 200]
CONFIG = {
    "task": "train", "seed": 42, "sentence": "Your journey starts with one step", "device": "cpu",
    "tokenizer": {"encoding": "gpt2"},
    "model": {"d_model": 6, "d_k": 4, "d_v": 6, "init_std": 1.0, "positional": "learned"},
    "optimizer": {"_target_": "torch.optim.Adam", "lr": 0.05, "weight_decay": None},
    "train": {"steps": 201, "snapshot_steps": SNAPSHOT_STEPS, "focus_token": 1,
              "loss_threshold": 0.01},
    "logging": {"tensorboard": True, "images": True, "figures": False}, "name": "李雷", "notes": "second try",
}
FOCUS_TAGS = [f"attention/focus/{n}" for n in
              ["0_Your", "1_journey", "2_starts", "3_with", "4_one", "5_step"]]


def synthetic_records(seed: int = 0):
    """201 losses (2.5 * 0.97**step, a few exact zeros at the end) and 5 snapshots, T=6."""
    rng = np.random.default_rng(seed)
    losses = 2.5 * 0.97 ** np.arange(201, dtype=np.float64)
    losses[-3:] = 0.0
    snaps = [Snapshot(step=s, loss=float(losses[s]),
                      weights=rng.dirichlet(np.ones(6) / (1 + k), size=6)[None].astype(np.float32))
             for k, s in enumerate(SNAPSHOT_STEPS)]
    return losses, snaps


def write_run(run_dir: Path, images: bool = True, batch: int = 7):
    """Drive a TensorBoardSink like the training loop does; returns (losses, snapshots)."""
    losses, snaps = synthetic_records()
    sink = TensorBoardSink(run_dir, images=images)
    try:
        sink.on_start(RunInfo(CONFIG, TOKEN_IDS, TOKENS, SNAPSHOT_STEPS, 201, 1, run_dir))
        pending = {s.step: s for s in snaps}
        for start in range(0, 201, batch):  # batches that straddle snapshot steps
            steps = np.arange(start, min(start + batch, 201))
            sink.on_losses(steps, losses[steps])
            for step in steps:
                if step in pending:
                    sink.on_snapshot(pending.pop(step))
        reached = int(np.flatnonzero(losses < CONFIG["train"]["loss_threshold"])[0])  # training.LossRecorder's job
        sink.on_end(RunResult("completed", 201, float(losses[-1]), 1.0, steps_to_threshold=reached, losses=losses))
    finally:
        sink.close()
    return losses, snaps


def accumulate(run_dir: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    guidance = {k: 0 for k in ("scalars", "images", "tensors", "histograms", "audio",
                               "compressedHistograms")}
    return EventAccumulator(str(run_dir), size_guidance=guidance).Reload()


def hparams_session(ea):
    """(experiment, session_start_info, session_end_info) from the run's own event file."""
    from tensorboard.plugins.hparams import metadata

    content = ea.PluginTagToContent("hparams")
    return (metadata.parse_experiment_plugin_data(content[metadata.EXPERIMENT_TAG]),
            metadata.parse_session_start_info_plugin_data(content[metadata.SESSION_START_INFO_TAG]),
            metadata.parse_session_end_info_plugin_data(content[metadata.SESSION_END_INFO_TAG]))


def test_helpers():
    assert tag_names([" with", "with", "$", "你好", " a/b c"]) == \
        ["0_with", "1_with", "2__", "3_你好", "4_a_b_c"]
    flat = flatten_config(CONFIG)
    assert flat["model.d_model"] == 6
    assert flat["optimizer.lr"] == 0.05
    assert flat["train.snapshot_steps"] == "[0, 20, 50, 100, 200]"
    assert flat["optimizer.weight_decay"] == "none"
    assert flat["logging.images"] == "true"
    w = np.array([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0], [1 / 3, 1 / 3, 1 / 3]])
    np.testing.assert_allclose(entropy(w), [np.log(2), 0.0, np.log(3)])


def test_event_file_contents(tmp_path):
    losses, snaps = write_run(tmp_path)
    events = list(tmp_path.glob("events.out.tfevents.*"))
    assert len(events) == 1
    assert [p for p in tmp_path.iterdir() if p.is_dir()] == []
    ea = accumulate(tmp_path)

    loss = ea.Scalars("loss")
    assert [e.step for e in loss] == list(range(201))
    np.testing.assert_array_equal([e.value for e in loss], losses.astype(np.float32))

    assert [e.step for e in ea.Images("attention/weights")] == SNAPSHOT_STEPS
    first = ea.Images("attention/weights")[0]
    assert first.encoded_image_string[:8] == b"\x89PNG\r\n\x1a\n"
    assert first.width > 100

    for k, tag in enumerate(FOCUS_TAGS):
        events = ea.Scalars(tag)
        assert [e.step for e in events] == SNAPSHOT_STEPS
        expected = [s.weights[0, 1, k] for s in snaps]  # focus token 1 ("journey") -> k
        np.testing.assert_allclose([e.value for e in events], expected, rtol=1e-6)
    ent = ea.Scalars("attention/entropy/3_with")
    np.testing.assert_allclose([e.value for e in ent], [entropy(s.weights[0])[3] for s in snaps],
                               rtol=1e-6)

    exp, start, end = hparams_session(ea)
    assert {m.name.tag for m in exp.metric_infos} == {"hparam/final_loss", "hparam/steps_to_threshold",
                                                       "hparam/focus_step"}
    hp = start.hparams
    assert hp["model.d_model"].number_value == 6
    assert hp["optimizer.lr"].number_value == 0.05
    assert hp["optimizer._target_"].string_value == "torch.optim.Adam"
    assert hp["train.snapshot_steps"].string_value == "[0, 20, 50, 100, 200]"
    assert hp["status"].string_value == "completed"
    assert end.status == 1  # STATUS_SUCCESS
    assert ea.Scalars("hparam/final_loss")[0].value == 0.0
    threshold = int(np.flatnonzero(losses < 0.01)[0])
    assert ea.Scalars("hparam/steps_to_threshold")[0].value == threshold
    strongest = [float(s.weights.mean(axis=0)[1].max()) for s in snaps]  # ' journey''s strongest weight
    assert [e.value for e in ea.Scalars("focus/weight")] == pytest.approx(strongest, rel=1e-6)
    above = [step for step, w in zip(SNAPSHOT_STEPS, strongest) if w > 0.9]
    assert ea.Scalars("hparam/focus_step")[0].value == (above[0] if above else -1)

    text = {t: ea.Tensors(t)[0].tensor_proto.string_val[0].decode() for t in ea.Tags()["tensors"]}
    assert text["run/sentence/text_summary"] == CONFIG["sentence"]
    assert (text["run/name/text_summary"], text["run/notes/text_summary"], hp["name"].string_value) == (
        "李雷", "second try", "李雷")
    assert "| 3 | 351 | `' with'` |" in text["run/tokens/text_summary"]
    assert text["run/config/text_summary"].startswith("```yaml\n")
    assert "  d_model: 6\n" in text["run/config/text_summary"]


def test_images_are_the_heatmaps_of_the_snapshots(tmp_path):
    """Each snapshot's image in the event file is its heatmap (plots.heatmap_pixels: the
    step and loss in the title), decoded back to the same pixels."""
    import io

    from PIL import Image

    from attnlab.outputs.plots import heatmap_pixels

    _, snaps = write_run(tmp_path)
    events = accumulate(tmp_path).Images("attention/weights")
    assert [e.step for e in events] == SNAPSHOT_STEPS
    for snap, event in zip(snaps[:2], events):
        pixels = heatmap_pixels(TOKENS, snap.weights, f"step={snap.step}  loss={snap.loss:.4f}")
        assert (event.height, event.width) == pixels.shape[:2] == (400, 460)
        np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(event.encoded_image_string)).convert("RGB")),
                                      pixels)
    assert events[0].encoded_image_string != events[1].encoded_image_string


def test_no_images_option(tmp_path):
    write_run(tmp_path, images=False)
    ea = accumulate(tmp_path)
    assert ea.Tags()["images"] == []
    assert len(ea.Scalars("loss")) == 201


def test_failed_before_any_step(tmp_path):
    sink = TensorBoardSink(tmp_path)
    try:
        sink.on_start(RunInfo(CONFIG, TOKEN_IDS, TOKENS, SNAPSHOT_STEPS, 201, 1, tmp_path))
        sink.on_end(RunResult("failed", 0, None, 0.0, error="RuntimeError: boom"))
    finally:
        sink.close()
    ea = accumulate(tmp_path)
    _, start, end = hparams_session(ea)
    assert start.hparams["status"].string_value == "failed"
    assert end.status == 2  # STATUS_FAILURE
    assert ea.Scalars("hparam/steps_to_threshold")[0].value == -1
    assert np.isnan(ea.Scalars("hparam/final_loss")[0].value)
    assert "loss" not in ea.Tags()["scalars"]


def test_on_end_without_on_start(tmp_path):
    sink = TensorBoardSink(tmp_path)
    sink.on_end(RunResult("interrupted", 0, None, 0.0))
    sink.close()
    _, start, end = hparams_session(accumulate(tmp_path))
    assert start.hparams["status"].string_value == "interrupted"
    assert end.status == 2


def test_closed_before_any_record_writes_nothing(tmp_path):
    TensorBoardSink(tmp_path / "run").close()
    assert not (tmp_path / "run").exists()


def test_import_does_not_load_tensorboard():
    code = "import sys, attnlab.outputs.tensorboard; print(any(m.startswith(('tensorboard', " \
           "'torch.utils.tensorboard')) for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ----------------------------------------------------------------- a real TensorBoard server
def serve(logdir: Path, log: Path, timeout: float = 120.0):
    """Start ``tensorboard`` on a free port with every event file loaded before it serves
    (``--reload_task blocking``: no polling); returns (process, base URL) once it serves."""
    import selectors

    cmd = [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1",
           "--port", "0", "--load_fast=false", "--reload_task", "blocking", "--reload_interval", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen = b""
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stderr, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while b"(Press CTRL+C to quit)" not in seen:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):  # blocks until tensorboard writes
                proc.kill()
                pytest.fail(f"tensorboard not serving after {timeout} s:\n{seen.decode(errors='replace')[-2000:]}")
            chunk = os.read(proc.stderr.fileno(), 65536)
            if not chunk:
                pytest.fail(f"tensorboard exited {proc.wait()}:\n{seen.decode(errors='replace')[-2000:]}")
            seen += chunk
    log.write_bytes(seen)
    url = re.search(rb"at (http://[^ /]+)/? \(Press CTRL", seen).group(1).decode()
    return proc, url


def http(base: str, path: str, body: dict | None = None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data,
                                 headers={"Content-Type": "application/json"} if data else {})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def test_real_tensorboard_server(tmp_path, default_cli_run):
    """The default experiment (tutorial section 5) run by the ``attnlab`` command, served by a
    real ``tensorboard`` process and read back over its HTTP data API."""
    from attnlab.saved.safe_read import read_run_metrics as read_metrics
    from attnlab.saved.safe_read import read_summary

    run_dir, proc = default_cli_run
    run = run_dir.name
    assert proc.returncode == 0, proc.stderr
    summary = read_summary(run_dir)
    assert summary["status"] == "completed"
    assert summary["steps_run"] == 201
    assert (run_dir / "attention_evolution.png").exists()
    assert (run_dir / "loss.png").exists()
    _, losses = read_metrics(run_dir)
    reached = summary["steps_to_threshold"]
    log = tmp_path / "tensorboard.log"
    proc, base = serve(run_dir.parent, log)
    try:
        assert "hparam/steps_to_threshold" in http(base, "/data/plugin/scalars/tags").get(run, {})
        assert http(base, "/data/runs") == [run]

        q = urllib.parse.urlencode({"run": run, "tag": "loss"})
        points = http(base, f"/data/plugin/scalars/scalars?{q}")  # [[wall_time, step, value]]
        assert [p[1] for p in points] == list(range(201))
        np.testing.assert_array_equal([p[2] for p in points], losses.astype(np.float32))
        assert round(points[0][2], 4) == 2.3566  # the tutorial's printed step-0 loss

        # tutorial: at step 200 ' journey' puts 0.99 of its attention on 'Your'
        q = urllib.parse.urlencode({"run": run, "tag": "attention/focus/0_Your"})
        focus = http(base, f"/data/plugin/scalars/scalars?{q}")
        assert [p[1] for p in focus] == SNAPSHOT_STEPS
        assert [round(p[2], 2) for p in focus] == [0.22, 0.57, 0.84, 0.99, 0.99]

        images = http(base, "/data/plugin/images/tags")
        assert images[run]["attention/weights"]["samples"] == 1
        q = urllib.parse.urlencode({"run": run, "tag": "attention/weights", "sample": 0})
        assert [e["step"] for e in http(base, f"/data/plugin/images/images?{q}")] == SNAPSHOT_STEPS

        text = http(base, "/data/plugin/text/tags")
        assert sorted(text[run]) == ["run/config/text_summary", "run/sentence/text_summary",
                                     "run/tokens/text_summary"]

        # hparams plugin routes (tensorboard/plugins/hparams/http_api.md): POST JSON protos
        exp = http(base, "/data/plugin/hparams/experiment", {"experimentName": ""})
        names = {h["name"] for h in exp["hparamInfos"]}
        assert {"model.d_model", "optimizer.lr", "train.snapshot_steps", "status"} <= names
        assert {m["name"]["tag"] for m in exp["metricInfos"]} == \
            {"hparam/final_loss", "hparam/steps_to_threshold", "hparam/focus_step"}
        groups = http(base, "/data/plugin/hparams/session_groups", {
            "experimentName": "", "startIndex": 0, "sliceSize": 10,
            "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE",
                                "STATUS_RUNNING"],
            "colParams": [{"hparam": "optimizer.lr"}, {"hparam": "status"},
                          {"hparam": "train.snapshot_steps"},
                          {"metric": {"tag": "hparam/final_loss"}}],
        })
        [group] = groups["sessionGroups"]
        assert group["hparams"]["optimizer.lr"] == 0.05
        assert group["hparams"]["status"] == "completed"
        assert group["hparams"]["train.snapshot_steps"] == "[0, 20, 50, 100, 200]"
        metrics = {m["name"]["tag"]: m["value"] for m in group["metricValues"]}
        assert metrics["hparam/final_loss"] == pytest.approx(summary["final_loss"], rel=1e-6)
        assert metrics["hparam/steps_to_threshold"] == reached > 0
        assert metrics["hparam/focus_step"] == 100  # ' journey' -> 'Your': 0.84 at step 50, 0.99 at 100
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
