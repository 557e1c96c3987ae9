"""Labels of tokens that are parts of a character (你的旅程 🚶) reach every place labels are used:
the console line, attention.npz ``tokens``, TensorBoard tags and token table, attnlab-compare."""
from __future__ import annotations

import numpy as np
from omegaconf import OmegaConf

from attnlab.commands import compare
from attnlab.commands.job import run_job
from attnlab.saved import safe_read

from conftest import compose_cfg

# 你的旅程 🚶: 你 e4 bd a0 | 的 e7 9a 84 | 旅 e6 97 85 | 程 e7 a8 8b | ' ' 20 | 🚶 f0 9f 9a b6, GPT-2 tokens
# [e4 bd][a0][e7 9a 84][e6 97][85][e7][a8][8b][20 f0 9f][9a][b6]
LABELS = ["你(1/2)", "你(2/2)", "的", "旅(1/2)", "旅(2/2)", "程(1/3)", "程(2/3)", "程(3/3)", " 🚶(1/3)", "🚶(2/3)",
          "🚶(3/3)"]


def test_labels_in_console_npz_tensorboard_and_compare(tmp_path, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir = tmp_path / "run"
    cfg = compose_cfg('sentence="你的旅程 🚶"', "train.focus_token=3", "train.steps=2", "train.snapshot_steps=[0,1]",
                      "logging.images=false", "logging.figures=false")
    assert run_job(cfg, run_dir).status == "completed"
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("step   0"))
    assert "|  '旅(1/2)' attends: '你(1/2)'=" in line
    assert " '🚶(1/3)'=" in line and " '程(3/3)'=" in line  # labels stripped, like the tutorial's t.strip()
    npz = safe_read.read_attention(run_dir)
    assert npz["token_ids"].tolist() == [19526, 254, 21410, 33768, 227, 163, 101, 233, 12520, 248, 114]
    assert npz["tokens"].tolist() == LABELS
    ea = EventAccumulator(str(run_dir)).Reload()
    focus = [t for t in ea.Tags()["scalars"] if t.startswith("attention/focus/")]
    assert focus == ["attention/focus/0_你_1_2", "attention/focus/1_你_2_2", "attention/focus/2_的",
                     "attention/focus/3_旅_1_2", "attention/focus/4_旅_2_2", "attention/focus/5_程_1_3",
                     "attention/focus/6_程_2_3", "attention/focus/7_程_3_3", "attention/focus/8_🚶_1_3",
                     "attention/focus/9_🚶_2_3", "attention/focus/10_🚶_3_3"]
    table = ea.Tensors("run/tokens/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "| 3 | 33768 | `'旅(1/2)'` |" in table
    assert "| 8 | 12520 | `' 🚶(1/3)'` |" in table
    # attnlab-compare reads the labels back from attention.npz
    (run_dir / ".hydra").mkdir()
    OmegaConf.save(cfg, run_dir / ".hydra" / "config.yaml")
    assert compare.main([str(run_dir)]) == 0
    row = capsys.readouterr().out.splitlines()[2]
    target = LABELS[int(np.argmax(npz["weights"][-1, 0, 3]))]  # where 旅(1/2) attends most at step 1
    assert f"'旅(1/2)'  {target!r}" in row
