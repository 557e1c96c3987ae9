"""The five exercises of tutorial section 8 as presets: each is one command (`attnlab
experiment=exerciseN`, a sweep by itself) and each job's summary.json holds the measured answer.
The walkthrough presets' jobs run in-process (the preset's sweep expanded as Hydra's basic sweeper
does; exercise 4's training jobs too); a preset with its sentence overridden goes through the command."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from attnlab.core import exercises
from attnlab.core.focus import FocusSink
from attnlab.core.tokenizer import encode, token_labels
from attnlab.core.training import train
from attnlab.core.walkthrough import walkthrough
from attnlab.saved.columns import observed_cells

from conftest import compose_cfg, read_csv, sweep_jobs


def run_exercise(cli, tmp_path: Path, n: int, *overrides: str) -> tuple[list[dict], list[dict]]:
    """``attnlab experiment=exerciseN`` (no -m: the preset is a sweep) into a temp sweep dir;
    returns (summary.csv rows, each job's summary.json) in job order."""
    sweep = tmp_path / f"ex{n}"
    proc = cli(f"experiment=exercise{n}", *overrides, f"hydra.sweep.dir={sweep}")
    assert proc.returncode == 0, proc.stderr
    rows = read_csv(sweep / "summary.csv")
    summaries = [json.loads((sweep / r["job"] / "summary.json").read_text(encoding="utf-8")) for r in rows]
    assert all(s["status"] == "completed" for s in summaries)
    return rows, summaries


def walkthrough_answers(n: int) -> list[tuple[dict, dict]]:
    """Each job of walkthrough preset exerciseN in-process: (its observations, their table cells)."""
    answers = []
    for job in sweep_jobs(n):
        cfg = compose_cfg(f"experiment=exercise{n}", *job)
        arrays = walkthrough(cfg, print_line=lambda line: None)
        ids = arrays["token_ids"].tolist()
        observed = exercises.observe(cfg, ids, token_labels(ids, cfg.tokenizer.encoding), arrays)
        answers.append((observed, observed_cells(observed)))
    return answers


def test_exercise1_shapes_at_every_stage():
    assert sweep_jobs(1) == [["model.d_model=6"], ["model.d_model=16"]]
    sums, rows = zip(*walkthrough_answers(1))
    for d_model, s in zip((6, 16), sums):
        assert s["shapes"] == {"token_embeddings": [6, d_model], "pos_embeddings": [6, d_model], "X": [6, d_model],
                               "Q": [6, 4], "K": [6, 4], "V": [6, 4], "scores": [6, 6], "weights": [6, 6],
                               "Z": [6, 4]}
    assert rows[1]["shapes"] == "X=6x16 Q=6x4 K=6x4 V=6x4 weights=6x6 Z=6x4"


def test_exercise2_token_count_and_table_for_english_chinese_emoji(attnlab_here, tmp_path):
    sums, rows = zip(*walkthrough_answers(2))
    sentences = ["Attention is all you need", "你的旅程从一步开始", "One small step 🚶 at a time"]
    assert [s["n_tokens"] for s in sums] == [len(encode(t)) for t in sentences] == [6, 17, 9]
    assert sums[0]["token_table"] == [[8086, "Att"], [1463, "ention"], [318, " is"], [477, " all"],
                                      [345, " you"], [761, " need"]]
    zh = sums[1]["token_table"]
    assert [i for i, _ in zh] == encode(sentences[1])
    assert zh[2] == [21410, "的"]
    # 你 (e4 bd a0) is tokens 19526 (e4 bd) and 254 (a0); 程 (e7 a8 8b) is 163, 101, 233
    assert zh[:2] == [[19526, "你(1/2)"], [254, "你(2/2)"]]
    assert zh[5:8] == [[163, "程(1/3)"], [101, "程(2/3)"], [233, "程(3/3)"]]
    emoji = [label for _, label in sums[2]["token_table"]]
    # 🚶 (f0 9f 9a b6) is 3 tokens: 12520 (' ' f0 9f), 248 (9a), 114 (b6)
    assert emoji[3:6] == [" 🚶(1/3)", "🚶(2/3)", "🚶(3/3)"]
    assert [i for i, _ in sums[2]["token_table"]][3:6] == [12520, 248, 114]
    assert [r["n_tokens"] for r in rows] == [6, 17, 9]
    # your own sentence replaces the preset's three
    rows, sums = run_exercise(attnlab_here, tmp_path / "own", 2, 'sentence="Your journey starts with one step"')
    assert len(rows) == 1
    assert sums[0]["n_tokens"] == 6
    assert [i for i, _ in sums[0]["token_table"]] == [7120, 7002, 4940, 351, 530, 2239]


def test_exercise3_init_std_decides_whether_attention_is_uniform(attnlab_here, tmp_path):
    assert sweep_jobs(3) == [["model.init_std=0.02"], ["model.init_std=1.0"]]
    procs = []
    rows, _ = run_exercise(lambda *a: procs.append(attnlab_here(*a)) or procs[-1], tmp_path, 3)
    # the table names no key of a uniform row
    assert [(r["focus_target"], r["focus_weight"][:5]) for r in rows] == [("uniform (1/6)", "0.166"), (" step", "0.215")]
    assert re.search(r"' journey' +uniform \(1/6\) +0\.167", procs[0].stdout)
    out = procs[0].stdout.split("\n\n")  # the table, then the answer under it
    table_at = next(i for i, part in enumerate(out) if "farthest from 1/T" in part)
    assert out[table_at + 1].startswith("Exercise 3, answer: with init std 0.02 every weight is within 7.10e-05")
    sums, _ = zip(*walkthrough_answers(3))
    small, large = (s["max_abs_weight_minus_uniform"] for s in sums)
    assert small == pytest.approx(7.10e-05, rel=0.01)  # std 0.02: every weight is 0.167 to 4 decimals
    assert large == pytest.approx(0.1853, abs=1e-4)  # std 1.0: no longer uniform
    assert small < 1e-3 < 0.1 < large


def test_exercise4_lr_steps_grid():
    jobs = sweep_jobs(4)
    assert len(jobs) == 6
    grid = {}
    for job in jobs:
        focus = FocusSink()
        result = train(compose_cfg("experiment=exercise4", *job, "logging=off"), [focus])
        lr, steps = (value.split("=")[1] for value in job)
        grid[lr, int(steps)] = (result, focus.summary()["focus"])
    assert sorted(grid) == [("0.005", 30), ("0.005", 120), ("0.05", 30), ("0.05", 120), ("0.5", 30), ("0.5", 120)]
    assert all(result.steps_run == steps for (_, steps), (result, _) in grid.items())
    tutorial = grid["0.05", 120][0]
    assert tutorial.steps_to_threshold == 94  # the tutorial's run: below 1e-3 at step 94
    assert tutorial.final_loss < 1e-3
    for key in [("0.005", 30), ("0.005", 120), ("0.05", 30), ("0.5", 30), ("0.5", 120)]:
        assert grid[key][0].steps_to_threshold is None
    slow, stuck = grid["0.005", 120][0].final_loss, grid["0.5", 120][0].final_loss
    assert tutorial.final_loss < 1e-3 < 0.1 < slow < 1.0 < stuck  # lr too small: slow; too large: stuck
    # how fast attention focuses (README): a snapshot every 5 steps; the first above 0.9, per lr
    passes = {lr: (grid[lr, 120][1]["mean"]["first_step_above"], grid[lr, 120][1]["mean"]["token"])
              for lr in ("0.005", "0.05", "0.5")}
    assert passes == {"0.005": (None, "Your"), "0.05": (60, "Your"), "0.5": (10, " starts")}
    assert grid["0.005", 120][1]["mean"]["weight"] == pytest.approx(0.846, abs=0.002)  # 0.85 at step 119
    for lr in ("0.005", "0.05", "0.5"):  # the same lr repeats the shorter run's steps exactly
        (_, short), (_, long) = grid[lr, 30], grid[lr, 120]
        assert short["step"] == 29 and long["step"] == 119
        assert short["mean"]["first_step_above"] == (long["mean"]["first_step_above"] if lr == "0.5" else None)


def test_exercise5_without_positions_orders_are_a_permutation():
    assert sweep_jobs(5) == [["model.positional=learned"], ["model.positional=none"]]
    sums, rows = zip(*walkthrough_answers(5))
    learned, none = (s["permutation_check"] for s in sums)
    for p in (learned, none):
        assert p["compare_sentence"] == "Your journey starts with step one"
        assert p["token_ids_a"] == [7120, 7002, 4940, 351, 530, 2239]
        assert p["token_ids_b"] == [7120, 7002, 4940, 351, 2239, 530]  # ' step' ' one'
        assert p["tokens_are_permutation"] is True
        assert p["permutation"] == [0, 1, 2, 3, 5, 4]
    assert none["z_max_abs_diff"] < 1e-6
    assert none["x_max_abs_diff"] == 0.0
    assert learned["z_max_abs_diff"] > 0.1
    assert learned["x_max_abs_diff"] > 0.1
    assert rows[1]["perm_z_max_abs_diff"] == none["z_max_abs_diff"]


def test_permutation_check_at_sentence_start_tokens_differ(cfg_of):
    """GPT-2 gives 'one' (505) at a sentence start and ' one' (530) mid-sentence: not a reordering."""
    cfg = cfg_of("task=walkthrough", "model.positional=none", "sentence=one step",
                 "analysis.compare_sentence=step one")
    p = exercises.permutation_check(cfg)
    assert p["token_ids_a"] == [505, 2239]
    assert p["token_ids_b"] == [9662, 530]
    assert p["tokens_are_permutation"] is False
    assert p["z_max_abs_diff"] is None
    same = exercises.permutation_check(cfg_of("model.positional=none", "sentence=Your journey starts with one step",
                                              "analysis.compare_sentence=Your journey starts with step one"))
    assert same["z_max_abs_diff"] < 1e-6  # also for the training order of parameters


def test_helpers():
    assert exercises.row_matching([5, 7, 5], [7, 5, 5]) == [1, 0, 2]
    assert exercises.row_matching([5, 7], [7, 7]) is None
    w = np.full((4, 4), 0.25)
    w[0] = [0.7, 0.1, 0.1, 0.1]
    assert exercises.max_abs_weight_minus_uniform(w) == pytest.approx(0.45)
