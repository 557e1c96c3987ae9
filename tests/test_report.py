"""The offline HTML report (attnlab.saved.report): the data it embeds is the run's own (attention.npz,
metrics.csv, summary.json, config), the page loads nothing from the network, no token can break
out of the data, damaged runs are reported instead of crashing the page, sizes stay in budget.
The browser side is in test_report_browser.py."""
from __future__ import annotations

import json
import math
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
import yaml
from report_helpers import DATA_OPEN, network_refs, page_data, scripts_of, write_synthetic_run

from attnlab.commands import report as report_command
from attnlab.commands.job import run_job
from attnlab.saved import report, report_data, safe_read, table
from attnlab.saved.runs import collect_rows

from conftest import GOLDEN_SECTION5, TUTORIAL_IDS, compose_cfg

EVIL = "</script><script>alert(1)</script>"


# ------------------------------------------------------------------ the default run's page
@pytest.fixture(scope="module")
def default_page(default_run) -> Path:
    return report.write_run_report(default_run)


def test_default_page_embeds_the_runs_own_numbers(default_run, default_page):
    assert default_page == default_run / "report.html"
    (run,) = page_data(default_page)["runs"]
    att = safe_read.read_attention(default_run)
    steps, losses = safe_read.read_run_metrics(default_run)
    # every snapshot step, the weights within 1e-4 (rounded to 4 decimals), tokens and ids
    assert run["steps"] == att["steps"].tolist() == list(GOLDEN_SECTION5)
    assert run["snapshots_total"] == 5 and run["heads"] == 1
    w = np.asarray(run["weights"], dtype=np.float64)
    assert w.shape == att["weights"].shape == (5, 1, 6, 6)
    assert np.abs(w - att["weights"]).max() <= 5.0001e-5
    assert run["tokens"] == att["tokens"].tolist() and run["token_ids"] == TUTORIAL_IDS
    # the tutorial's numbers, read from the page's data
    for k, (step, (loss, row)) in enumerate(GOLDEN_SECTION5.items()):
        assert round(run["snapshot_loss"][k], 4) == loss
        assert [round(v, 2) for v in run["weights"][k][0][1]] == row
    assert run["snapshot_loss"][0] == losses[0]  # full precision, as metrics.csv
    # every loss (201 <= MAX_LOSS_POINTS) at full precision
    assert run["loss"]["steps"] == steps.tolist() and run["loss"]["values"] == losses.tolist()
    summary = json.loads((default_run / "summary.json").read_text())
    assert run["status"] == "completed" and run["error"] is None and run["problems"] == []
    assert run["steps_to_threshold"] == summary["steps_to_threshold"] == 94
    assert run["final_loss"] == summary["final_loss"] and run["versions"] == summary["versions"]
    assert run["focus"] == {"token": " journey", "target": "Your", "weight": float(att["weights"][-1, 0, 1, 0]),
                            "step": 200, "uniform": False}
    assert run["focus_token"] == 1 and run["loss_threshold"] == 0.001
    # the config the run used, as summary.json recorded it (Hydra's file keeps d_v: ${model.d_model})
    saved = yaml.safe_load((default_run / ".hydra" / "config.yaml").read_text())
    assert saved["model"]["d_v"] == "${model.d_model}" and run["config"]["model"]["d_v"] == 6
    assert run["config"] == summary["config"] and run["config"].keys() == saved.keys()


def test_default_page_size_and_no_network(default_page):
    size = default_page.stat().st_size
    assert size <= 1_000_000, f"default report is {size:,} bytes"
    text = default_page.read_text(encoding="utf-8")
    assert network_refs(text) == []
    assert "<link" not in text and "<img" not in text and "<iframe" not in text
    # exactly two scripts: the data (JSON) and the page's own code, inline
    scripts = scripts_of(default_page)
    assert [a for a, _ in scripts] == [{"type": "application/json", "id": "attnlab-data"}, {}]
    assert "default-src 'none'" in text  # CSP: the browser itself refuses any request from the page


def test_network_check_finds_what_it_should():
    """network_refs is not vacuous: each kind of external reference is caught."""
    bad = ['<script src="https://cdn.example/x.js">', "<a href='http://x.org'>", "<img src=//cdn.example/a.png>",
           'import x from "https://esm.sh/x"', 'import("https://esm.sh/y")', "@import 'a.css';",
           "background: url(https://x/y.png)", 'url("//fonts.example/f.woff2")']
    assert all(network_refs(b) for b in bad)
    assert network_refs('const SVGNS = "http://www.w3.org/2000/svg"; <a href="#run=1">') == []


def test_run_report_leaves_no_temporary_files(default_run, default_page):
    before = sorted(p.name for p in default_run.iterdir())
    report.write_run_report(default_run)
    assert sorted(p.name for p in default_run.iterdir()) == before
    assert not [p for p in default_run.iterdir() if p.name.startswith(".report.html")]


# ------------------------------------------------------------------ sweeps, comparisons, the CLI
def test_sweep_report_matches_attnlab_compare(report_sweep):
    page = report.write_sweep_report(report_sweep)
    assert page == report_sweep / "report.html"
    runs = page_data(page)["runs"]
    rows = collect_rows([report_sweep])
    assert [r["name"] for r in runs] == [r["job"] for r in rows] == ["0_optimizer.lr=0.01",
                                                                    "1_optimizer.lr=0.05"]
    assert [r["label"] for r in runs] == ["0: lr=0.01", "1: lr=0.05"]  # as attnlab-compare --plot names them
    for run, row in zip(runs, rows):  # the same columns as attnlab-compare, from the same files
        assert run["status"] == row["status"] and run["final_loss"] == row["final_loss"]
        assert run["steps_to_threshold"] == row["steps_to_threshold"]
        assert run["wall_time_s"] == row["wall_time_s"] and run["error"] == row["error"]
        assert (run["focus"]["token"], run["focus"]["target"], run["focus"]["step"]) == \
            (row["focus_token"], row["focus_target"], row["snapshot_step"])
        assert run["focus"]["weight"] == row["focus_weight"]  # the page rounds it once, as attnlab-compare
    assert runs[0]["config"]["optimizer"]["lr"] == 0.01 and runs[1]["config"]["optimizer"]["lr"] == 0.05


def test_the_focus_weight_of_several_heads_is_the_runs_not_a_mean_of_rounded_weights(tmp_path):
    """With several heads the focus weight is the heads' mean of the unrounded last snapshot, as
    summary.json and attnlab-compare have it (0.605540), not a mean of the page's rounded weights."""
    from conftest import run_here

    run = tmp_path / "h2"
    proc = run_here(f"hydra.run.dir={run}", "logging=off", "model.n_heads=2", "model.d_k=2", "model.d_v=3")
    assert proc.returncode == 0, proc.stderr
    mean = json.loads((run / "summary.json").read_text(encoding="utf-8"))["focus"]["mean"]
    (row,) = collect_rows([run])
    record = report_data.load_run(run)
    assert record["heads"] == 2
    assert record["focus"]["target"] == row["focus_target"] == mean["token"]
    assert record["focus"]["weight"] == row["focus_weight"] == mean["weight"]
    # the page has attnlab-compare's observation cells too: "each head looks at", "first >0.9 at step"
    assert record["table"]["heads_focus"]["text"] == table.cell_text("heads_focus", row["heads_focus"])
    assert "0:" in row["heads_focus"] and row["heads_focus"].startswith(record["table"]["heads_focus"]["text"][:20])
    assert row["focus_step"] == mean["first_step_above"]
    assert record["table"].get("focus_step", {"text": "-"})["text"] == table.cell_text("focus_step", row["focus_step"])
    assert record["table"]["focus_weight"]["text"] == f"{mean['weight']:.3f}"
    # someone else's summary.json claiming another head weight: the cells are attention.npz's, the page still made
    summary, cell = json.loads((run / "summary.json").read_text(encoding="utf-8")), row["heads_focus"]
    summary["focus"]["heads"][0]["weight"] = "high"
    (run / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    (row,) = collect_rows([run])
    assert row["error"] is None and row["heads_focus"] == cell
    assert report_data.load_run(run)["table"]["heads_focus"]["text"] == table.cell_text("heads_focus", row["heads_focus"])
    page = report.write_page([report_data.load_run(run)], tmp_path / "page.html")
    columns = page_data(page)["table_columns"]
    assert [c["key"] for c in columns] == table.columns_of([row], table=True)
    assert {"key": "heads_focus", "title": "each head looks at", "right": False} in columns


def test_cli_writes_comparison_and_refuses_non_runs(default_run, report_sweep, tmp_path, capsys):
    out = tmp_path / "cmp.html"
    job = report_sweep / "1_optimizer.lr=0.05"
    assert report_command.main([str(default_run), str(job), "-o", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"report: {out} (2 runs, {out.stat().st_size / 1e6:.2f} MB)"
    runs = page_data(out)["runs"]
    assert [r["name"] for r in runs] == [f"{default_run.parent.name}/default",
                                         f"{report_sweep.parent.name}/{report_sweep.name}/{job.name}"]
    # the same training (lr 0.05, seed 42) gives the same weights whatever the logging
    assert runs[0]["weights"] == runs[1]["weights"]
    for bad, why in [(tmp_path / "nope", "no such file or directory"), (out, "not a directory"),
                     (tmp_path, "no .hydra/config.yaml in it or below it")]:
        assert report_command.main([str(bad), "-o", str(tmp_path / "x.html")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"attnlab-report: error: {bad}") and why in err
    assert not (tmp_path / "x.html").exists()
    assert report_command.main([str(default_run), "-o", str(tmp_path / "no" / "dir.html")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_walkthrough_run_is_one_snapshot(tmp_path):
    from omegaconf import OmegaConf

    run_dir = tmp_path / "walk"
    cfg = compose_cfg("experiment=tutorial_walkthrough", "logging.console=false")
    assert run_job(cfg, run_dir).status == "completed"
    (run_dir / ".hydra").mkdir()
    OmegaConf.save(cfg, run_dir / ".hydra" / "config.yaml")  # as Hydra saves it
    rec = report_data.load_run(run_dir)
    with np.load(run_dir / "walkthrough.npz") as npz:
        weights, ids = npz["weights"], npz["token_ids"]
    assert rec["kind"] == "walkthrough" and rec["steps"] == [0] and rec["token_ids"] == ids.tolist() == TUTORIAL_IDS
    assert rec["tokens"] == ["Your", " journey", " starts", " with", " one", " step"]
    assert np.abs(np.asarray(rec["weights"])[0, 0] - weights).max() <= 5.0001e-5
    assert rec["error"] is None and rec["loss"]["steps"] == []


# ------------------------------------------------------------------ untrusted run dirs
def test_token_text_stays_inert(tmp_path):
    tokens = [EVIL, "<!--", " a&b", "\u2028x", "注意力", " 🚀", "</SCRIPT >", "'\"\\"]
    run_dir = write_synthetic_run(tmp_path / "evil", tokens, steps=[0, 3])
    cfg = yaml.safe_load((run_dir / ".hydra" / "config.yaml").read_text())
    assert cfg["sentence"] == "".join(tokens)
    page = report.write_run_report(run_dir)
    text = page.read_text(encoding="utf-8")
    start = text.index(DATA_OPEN) + len(DATA_OPEN)
    block = text[start:text.index("</script>", start)]
    assert not set("<>&\u2028\u2029") & set(block)  # nothing in the data can end the element
    assert "alert(1)" not in text.replace(block, "")
    scripts = scripts_of(page)  # an HTML parser sees the same two scripts, the data intact
    assert len(scripts) == 2 and scripts[0][1] == block
    (run,) = json.loads(block)["runs"]
    # text from a run dir is printable on the page too: only the line separator is escaped here
    shown = [safe_read.printable(t) for t in tokens]
    assert shown == [EVIL, "<!--", " a&b", "\\u2028x", "注意力", " 🚀", "</SCRIPT >", "'\"\\"]
    assert run["tokens"] == shown and run["config"]["sentence"] == "".join(shown)


def _npz_bytes(**arrays) -> bytes:
    import io

    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def test_damaged_runs_become_records_and_the_report_is_written(tmp_path):
    sweep = tmp_path / "sweep"
    toks = ["Your", " journey", " starts", " with"]
    good = write_synthetic_run(sweep / "0_good", toks, steps=[0, 5, 9])
    damaged = {}

    def job(name: str) -> Path:
        d = write_synthetic_run(sweep / name, toks, steps=[0, 5, 9])
        damaged[name] = d
        return d

    att = job("1_truncated") / "attention.npz"
    att.write_bytes(att.read_bytes()[:300])
    (job("2_bad_summary") / "summary.json").write_text("{not json", encoding="utf-8")
    d = job("3_symlink")
    (d / "metrics.csv").unlink()
    (d / "metrics.csv").symlink_to("/etc/passwd")
    d = job("4_fifo")
    (d / "summary.json").unlink()
    os.mkfifo(d / "summary.json")  # reading it would block forever
    marker = tmp_path / "pwned"
    d = job("5_yaml_tag")
    (d / ".hydra" / "config.yaml").write_text(f'x: !!python/object/apply:os.system ["touch {marker}"]\n')
    d = job("6_huge_shape")  # a header that claims 1 TB of weights
    (d / "attention.npz").write_bytes(_npz_bytes(steps=np.arange(3), tokens=np.array(toks)) + b"")
    with zipfile.ZipFile(d / "attention.npz", "a") as zf:
        header = {"descr": "<f4", "fortran_order": False, "shape": (1_000_000, 1, 4096, 4096)}
        import io

        buf = io.BytesIO()
        np.lib.format.write_array_header_1_0(buf, header)
        zf.writestr("weights.npy", buf.getvalue() + b"\0" * 64)
    d = job("7_object_array")
    (d / "attention.npz").write_bytes(_npz_bytes(steps=np.arange(3), tokens=np.array(toks, dtype=object),
                                                 weights=np.zeros((3, 1, 4, 4), np.float32)))
    d = job("8_no_summary")
    (d / "summary.json").unlink()
    d = job("9_bad_metrics")
    (d / "metrics.csv").write_text("step,loss\n0,1.0\nten,2\n")
    d = job("10_big_summary")
    (d / "summary.json").write_text(json.dumps({"status": "completed", "pad": "x" * (safe_read.SUMMARY_LIMIT + 1)}))

    page = report.write_sweep_report(sweep)  # one page for all of them, no exception
    runs = {r["name"]: r for r in page_data(page)["runs"]}
    assert set(runs) == {"0_good", *damaged}
    assert runs["0_good"]["error"] is None and runs["0_good"]["steps"] == [0, 5, 9]
    assert np.abs(np.asarray(runs["0_good"]["weights"]) - safe_read.read_attention(good)["weights"]).max() <= 5.0001e-5
    # each problem as attnlab.saved.safe_read words it (the one reading layer; the file relative to the run dir)
    expect = {
        "1_truncated": ("completed", "attention.npz: not a zip archive (an .npz is one; empty or truncated?)"),
        "2_bad_summary": ("unreadable", "summary.json: not valid JSON"),
        "3_symlink": ("completed", "metrics.csv: is a symbolic link (refused: a run dir holds no links)"),
        "4_fifo": ("unreadable", "summary.json: is a FIFO (named pipe), not a regular file (refused)"),
        "5_yaml_tag": ("completed", ".hydra/config.yaml: refused YAML: tag tag:yaml.org,2002:python/object/apply:os.system"),
        "6_huge_shape": ("completed", "attention.npz: member weights.npy: its header declares shape (1000000, 1, 4096, 4096) "
                                      "<f4 (67108864000000 bytes) but the member holds 64"),
        "7_object_array": ("completed", "attention.npz: tokens has dtype object, allowed: strings of at most 256 characters"),
        "8_no_summary": ("missing", "no summary.json (the job did not start, or died before writing it)"),
        "9_bad_metrics": ("completed", "metrics.csv: line 3: step 'ten' is not a non-negative integer"),
        "10_big_summary": ("unreadable", f"bytes, more than the limit of {safe_read.SUMMARY_LIMIT} bytes"),
    }
    for name, (status, error) in expect.items():
        rec = runs[name]
        assert rec["status"] == status, (name, rec)
        assert error in rec["error"], (name, rec["error"])
        assert "\n" not in rec["error"]
    assert not marker.exists()  # the YAML tag was not executed
    assert runs["1_truncated"]["weights"] == [] and runs["1_truncated"]["loss"]["values"]  # what could be read is kept
    assert runs["3_symlink"]["weights"] and runs["3_symlink"]["loss"]["steps"] == []


# ------------------------------------------------------------------ downsampling and the page budget
def test_pick_frames_and_share_budget():
    assert report_data.pick_frames(5, 10_000, 100) == [0, 1, 2, 3, 4]
    picked = report_data.pick_frames(1000, 39 * 500, 500)
    assert len(picked) == 39 and picked[0] == 0 and picked[-1] == 999
    gaps = np.diff(picked)
    assert gaps.min() >= 26 and gaps.max() <= 27  # evenly spaced: 999 / 38 = 26.3
    assert report_data.pick_frames(1000, 999, 500) == [999]  # the last, when only one fits
    assert report_data.pick_frames(1000, 10, 500) == []  # none fits: the page stays within its budget
    shares = report_data.share_budget([100, 5_000, 0, 50_000], budget=30_000)
    assert shares == [100, 5_000, 0, 24_900]  # the small runs get what they need, the large one the rest
    assert report_data.share_budget([50_000, 40_000], budget=30_000) == [15_000, 15_000]
    # one frame of T = 256, H = 1 as JSON is at most 7 bytes per weight
    frame = np.full((1, 256, 256), 0.1234, dtype=np.float64)
    assert len(json.dumps(frame.tolist(), separators=(",", ":"))) <= report_data.frame_bytes(1, 256)


def test_large_run_is_downsampled_within_budget(large_run, tmp_path):
    page = report.write_report([large_run], tmp_path / "large.html")
    size = page.stat().st_size
    assert size <= 20_000_000, f"{size:,} bytes"
    (run,) = page_data(page)["runs"]
    k = report_data.WEIGHT_BUDGET // report_data.frame_bytes(1, 256)  # 18e6 // 459,268 = 39
    assert run["snapshots_total"] == 1000 and len(run["steps"]) == k == 39
    assert run["steps"][0] == 0 and run["steps"][-1] == 999
    gaps = np.diff(run["steps"])
    assert gaps.min() >= 26 and gaps.max() <= 27  # evenly spaced: 999 / 38 = 26.3
    with np.load(large_run / "attention.npz") as npz:
        full = npz["weights"]
    w = np.asarray(run["weights"], dtype=np.float64)
    assert w.shape == (39, 1, 256, 256)
    assert np.abs(w - full[run["steps"]]).max() <= 5.0001e-5
    _, losses = safe_read.read_run_metrics(large_run)
    assert run["loss"]["total"] == 1000 and run["loss"]["values"] == losses.tolist()  # 1000 <= MAX_LOSS_POINTS
    assert run["snapshot_loss"] == losses[run["steps"]].tolist()


def test_long_loss_curves_are_thinned_keeping_snapshot_steps(tmp_path):
    run_dir = write_synthetic_run(tmp_path / "long", ["a", "b", "c"], steps=[0, 1234, 4999])
    rec = report_data.load_run(run_dir)
    n = report_data.MAX_LOSS_POINTS
    assert rec["loss"]["total"] == 5000 and n <= len(rec["loss"]["steps"]) <= n + 3
    assert {0, 1234, 4999} <= set(rec["loss"]["steps"])
    assert rec["snapshot_loss"] == [1.0, 1.0 / 1235, 1.0 / 5000]


# ------------------------------------------------------------------ small pieces
def test_script_json_round_trips_and_non_finite_values_are_said():
    data = {"t": EVIL + "\u2028&", "n": [1.5, None]}
    text = report.script_json(data)
    assert json.loads(text) == data and "<" not in text and "&" not in text
    assert report_data._jsonable({"a": math.nan, "b": [math.inf, -math.inf], 3: np.float32(0.5)}) == \
        {"a": "nan", "b": ["inf", "-inf"], "3": 0.5}


def test_compressed_archives_are_read_and_bounded(tmp_path, monkeypatch):
    """np.savez_compressed archives (not attnlab's own) are streamed; the frames are the same."""
    toks = ["a", "b", "c"]
    run_dir = write_synthetic_run(tmp_path / "z", toks, steps=[0, 1, 2, 3])
    att = safe_read.read_attention(run_dir)
    np.savez_compressed(run_dir / "attention.npz", **att)
    rec = report_data.load_run(run_dir, max_weight_bytes=2 * report_data.frame_bytes(1, 3))
    assert rec["error"] is None and rec["steps"] == [0, 3]
    assert np.abs(np.asarray(rec["weights"]) - att["weights"][[0, 3]]).max() <= 5.0001e-5
    with zipfile.ZipFile(run_dir / "attention.npz") as zf:
        sizes = {i.filename: i.file_size for i in zf.infolist()}
    assert sizes["weights.npy"] > max(v for k, v in sizes.items() if k != "weights.npy")
    # a compressed archive whose members unpack to more than the limit is refused before any is read
    big = write_synthetic_run(tmp_path / "big", toks, steps=list(range(0, 300, 3)))
    np.savez_compressed(big / "attention.npz", **safe_read.read_attention(big))
    with zipfile.ZipFile(big / "attention.npz") as zf:
        declared = zf.getinfo("weights.npy").file_size
    limit = (big / "attention.npz").stat().st_size
    assert declared > limit  # the weights compress: the archive is smaller than what it unpacks to
    monkeypatch.setattr(report_data, "NPZ_LIMIT", limit)
    safe_read.reset_counters()
    rec = report_data.load_run(big)
    assert rec["error"].startswith("attention.npz: members declare ")
    assert rec["error"].endswith(f" bytes uncompressed, more than the limit of {limit}")
    assert rec["weights"] == [] and rec["tokens"] == []  # a refused archive is not used at all
    assert safe_read.counters()["bytes_decompressed"] < 1024  # the steps' .npy header, nothing of the weights


def test_yaml_alias_bomb_and_reference_chains_stay_small(tmp_path):
    run_dir = write_synthetic_run(tmp_path / "bomb", ["a", "b", "c"], steps=[0, 1])
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]  # 10^9 leaves
    refs = ["r0: v"] + [f"r{i}: " + "'" + "${r%d}" % (i - 1) * 40 + "'" for i in range(1, 30)]  # 40^29 expansions
    (run_dir / ".hydra" / "config.yaml").write_text("\n".join(refs + lines) + "\n")
    rec = report_data.load_run(run_dir)  # the alias bomb is refused while parsing (safe_read's node bound)
    assert rec["error"] == (f".hydra/config.yaml: refused YAML: more than {safe_read.YAML_MAX_NODES} YAML nodes "
                            "(aliases expanded)")
    assert rec["config"] == {} and rec["weights"]  # the rest of the run is shown
    (run_dir / ".hydra" / "config.yaml").write_text("\n".join(refs) + "\n")
    summary = json.loads((run_dir / "summary.json").read_text())  # many values: JSON has no aliases, only size
    (run_dir / "summary.json").write_text(json.dumps({**summary, "many": [0] * 100_000}))
    rec = report_data.load_run(run_dir)
    assert rec["error"] is None
    text = json.dumps([rec["config"], rec["recorded"]], ensure_ascii=False)
    assert len(text) < 40 * report_data.MAX_NODES + 40 * report_data.MAX_STR and "…" in text
    assert rec["config"]["r1"] == "${r0}" * 40  # text around a reference: shown as written, never expanded


def test_every_run_and_sweep_writes_its_report(default_run, tmp_path, attnlab_here):
    """logging.report (default true): the run's report.html is its last file; a sweep writes
    one over its jobs at its end; logging=off writes none."""
    runs = page_data(default_run / "report.html")["runs"]
    assert [r["steps"] for r in runs] == [[0, 20, 50, 100, 200]]
    assert runs[0]["status"] == "completed"
    sweep = tmp_path / "sweep"
    proc = attnlab_here("-m", "seed=1,2", "train.steps=20", "logging=off", "logging.report=true", f"hydra.sweep.dir={sweep}")
    assert proc.returncode == 0, proc.stderr
    assert f"report: {sweep / 'report.html'}" in proc.stdout
    assert [r["name"] for r in page_data(sweep / "report.html")["runs"]] == [
        "0_seed=1", "1_seed=2"]
    assert sorted(p.name for p in sweep.glob("*/report.html")) == ["report.html", "report.html"]
    quiet = tmp_path / "quiet"
    assert attnlab_here(f"hydra.run.dir={quiet}", "train.steps=20", "logging=off").returncode == 0
    assert not (quiet / "report.html").exists()


def test_the_runs_table_shows_attnlab_compares_cells(tmp_path):
    """The page's runs table is attnlab-compare's: columns, headers, cells (0.0, 4.94e-06, an
    object cell, a NaN focus) and sort values, made by the same functions from the same rows."""
    sweep = tmp_path / "sweep"
    tokens = ["Your", " journey", " starts"]
    for i in range(3):
        write_synthetic_run(sweep / f"{i}_run{i}", tokens, [0, 5], seed=i)
    edit = sweep / "1_run1" / "summary.json"
    summary = json.loads(edit.read_text(encoding="utf-8"))
    summary["config"] = {"model": {"causal": True}, "train": {"focus_token": 1}}
    summary.update(permutation_check={"tokens_are_permutation": {"x": 1}, "z_max_abs_diff": float("nan")})
    edit.write_text(json.dumps(summary), encoding="utf-8")
    metrics = edit.with_name("metrics.csv")  # the cells are the data's: a last loss of 4.94e-06, causal weights
    metrics.write_text("".join(metrics.read_text().splitlines(keepends=True)[:-1]) + "5,4.94e-06\n")
    for npz, change in ((edit.with_name("attention.npz"), lambda w: np.tril(w) / np.tril(w).sum(-1, keepdims=True)),
                        (sweep / "2_run2" / "attention.npz", lambda w: np.where(np.eye(3)[1][:, None] > 0, np.nan, w))):
        with np.load(npz) as f:
            arrays = {k: f[k] for k in f.files}
        arrays["weights"][-1] = change(arrays["weights"][-1])  # (2_run2: the focus token's row of the last snapshot)
        np.savez(npz, **arrays)

    rows = collect_rows([sweep])
    data = page_data(report.write_page(report_data.collect_records([sweep]), tmp_path / "page.html"))
    cols = table.columns_of(rows, table=True)
    assert [c["key"] for c in data["table_columns"]] == cols
    assert [c["key"] for c in data["table_columns"] if c["right"]] == [
        "final_loss", "focus_weight", "snapshot_step", "wall_time_s", "focus_step", "upper_max", "perm_z_max_abs_diff"]
    shown = [{c: rec["table"][c]["text"] if c in rec["table"] else "-" for c in cols} for rec in data["runs"]]
    assert shown == [{c: table.cell_text(c, row.get(c)) for c in cols} for row in rows]
    assert (shown[1]["final_loss"], shown[1]["upper_max"], shown[1]["perm_tokens_match"]) == \
        ("4.94e-06", "0.0000", "{'x': 1}")
    assert (shown[2]["focus_target"], shown[2]["focus_weight"]) == ("'Your'", "nan")  # numpy's argmax of NaN
    assert data["runs"][2]["focus"]["weight"] == "nan"
    assert data["runs"][1]["table"]["perm_z_max_abs_diff"]["sort"] is None  # NaN sorts last, as --sort does
    places = [rec["table"]["final_loss"]["sort"] for rec in data["runs"]]
    assert places == [1, 0, 1]  # 4.94e-06 first; the two equal losses share a place


def _page_order(records: list, column: str, reverse: bool = False) -> list[int]:
    """The runs in the order a click on ``column``'s header gives (a second click: ``reverse``):
    by the cell's place, ties in page order, empty cells last (report_template.html's sort)."""
    place = [rec["table"][column]["sort"] if column in rec["table"] else None for rec in records]
    present = [i for i, p in enumerate(place) if p is not None]
    present.sort(key=lambda i: -place[i] if reverse else place[i])  # stable: ties keep page order
    return present + [i for i, p in enumerate(place) if p is None]


def test_odd_cells_sort_and_hide_as_attnlab_compare_does(tmp_path):
    """Odd cells sort as attnlab-compare --sort orders them: an integer too large for a float,
    integers above 2**53 and inf against the largest float, control characters, emoji against
    wide characters, texts alike for 250 characters; a "" cell and a lone surrogate keep their
    column as compare does."""
    sweep = tmp_path / "sweep"
    values = [  # final_loss, error, shapes
        (2 ** 53 + 1, "B", {"X": [1]}), (2 ** 53, "\x01", {"X": ["\ud800"]}), (2 ** 53 + 2, "A", {"X": ["?"]}),
        (10 ** 400, "😀", {}), (float("inf"), "！", {"X": [1]}), (1.7976931348623157e308, "a" * 250 + "b", {"X": [1]}),
        (float("-inf"), "a" * 250 + "a", {"X": [1]}), (-1.7976931348623157e308, None, {"X": [1]}),
        (float("nan"), "x" * 60, {"X": [1]}), (-0.0, "", {"X": [1]}),
    ]
    for i, (loss, error, shapes) in enumerate(values):
        run = write_synthetic_run(sweep / f"{i}_r", ["a", "b", "c"], [0, 2], seed=i)
        summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
        summary.update(final_loss=loss, error=error, shapes=shapes, status="x" * 300 if i == 3 else "failed")
        (run / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    rows = collect_rows([sweep])
    records = report_data.collect_records([sweep])
    data = page_data(report.write_page(records, tmp_path / "page.html"))  # no OverflowError
    cols = table.columns_of(rows, table=True)
    assert [c["key"] for c in data["table_columns"]] == cols and "shapes" in cols
    shown = [{c: rec["table"][c]["text"] if c in rec["table"] else "-" for c in cols} for rec in data["runs"]]
    assert shown == [{c: table.cell_text(c, row.get(c)) for c in cols} for row in rows]
    assert shown[3]["status"] == "x" * 47 + "…" and data["runs"][3]["table"]["status"]["full"] == "x" * 300
    index = {id(row): i for i, row in enumerate(rows)}
    for c in cols:
        for reverse in (False, True):
            want = [index[id(r)] for r in table.sort_rows(rows, c, reverse=reverse)]
            assert _page_order(data["runs"], c, reverse) == want, (c, reverse)


def test_the_page_shows_the_config_the_run_recorded_whatever_hydras_file_says(tmp_path):
    """summary.json's recorded config decides the row, the settings and the config shown; a damaged or
    different .hydra/config.yaml (which attnlab-compare does not read then) changes nothing."""
    sweep = tmp_path / "sweep"
    tokens = ["Your", " journey", " starts"]
    runs_ = [write_synthetic_run(sweep / f"{i}_r", tokens, [0, 4], seed=i) for i in range(3)]
    recorded = {"task": "train", "train": {"focus_token": 1, "loss_threshold": 0.001}}
    for run in runs_:
        summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
        summary["config"] = recorded
        summary.pop("task", None)
        (run / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    (runs_[0] / ".hydra" / "config.yaml").write_text("a: [unclosed\n", encoding="utf-8")
    (runs_[1] / ".hydra" / "config.yaml").write_text("task: walkthrough\n", encoding="utf-8")
    (runs_[2] / ".hydra" / "config.yaml").write_text("train:\n  focus_token: 2\n", encoding="utf-8")
    rows = collect_rows([sweep])
    assert [r["error"] for r in rows] == [None, None, None]
    records = report_data.collect_records([sweep])
    data = page_data(report.write_page(records, tmp_path / "page.html"))
    cols = table.columns_of(rows, table=True)
    assert [c["key"] for c in data["table_columns"]] == cols and "error" not in cols
    assert [(r["problems"], r["error"], r["kind"], r["config"]) for r in records] == [([], None, "train", recorded)] * 3
    assert records[2]["focus_token"] == 1 and records[2]["focus"]["token"] == " journey"


def test_integers_too_large_for_a_float_are_cells_in_compare_and_the_report(tmp_path):
    """A summary.json may hold 10**400 where a number is expected (a loss threshold, a head's
    weight, a wall time): each is a cell in compare and the report."""
    sweep = tmp_path / "sweep"
    for i in range(2):
        run = write_synthetic_run(sweep / f"{i}_r", ["Your", " journey", " starts"], [0, 4], seed=i)
        summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
        summary.update(config={"train": {"loss_threshold": 10 ** 400, "focus_token": 1}}, steps_to_threshold=None,
                       wall_time_s=-(10 ** 400) if i else 10 ** 400,
                       focus={"heads": [{"token": "Your", "weight": 10 ** 400}, {"token": " starts", "weight": 0.5}]})
        (run / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    rows = collect_rows([sweep])
    assert [(r["error"], r["steps_to_threshold"]) for r in rows] == [(None, 0)] * 2  # the heads: attention.npz's
    assert report_command.main([str(sweep), "-o", str(tmp_path / "page.html")]) == 0
    data = page_data(tmp_path / "page.html")
    cols = table.columns_of(rows, table=True)
    assert [{c: rec["table"][c]["text"] if c in rec["table"] else "-" for c in cols} for rec in data["runs"]] == \
        [{c: table.cell_text(c, row.get(c)) for c in cols} for row in rows]
    assert [rec["table"]["wall_time_s"]["sort"] for rec in data["runs"]] == [1, 0]


def test_a_cut_cell_is_whole_on_hover_and_heads_get_their_wider_column():
    """The heads column is allowed 100 characters in both tools, and any cut cell (clip's ``…`` or
    printable's ``…[+N chars]``) is whole on hover."""
    four = " ".join(f"{h}:' journey'=0.99" for h in range(4))  # 71 characters
    eight = " ".join(f"{h}:' journey'=0.99" for h in range(8))  # 143
    assert table.cell_text("heads_focus", four) == four
    assert table.cell_text("heads_focus", eight) == eight[:99] + "…"
    cells = table.page_cells({"job": "0", "status": "completed", "heads_focus": eight, "error": "e\x1b" * 40})
    assert (cells["heads_focus"]["text"], cells["heads_focus"]["full"]) == (eight[:99] + "…", eight)
    assert cells["error"]["text"] == table.cell_text("error", "e\x1b" * 40) and len(cells["error"]["text"]) == 48
    assert cells["error"]["full"] == "e\\x1b" * 40  # escaped, whole
    assert "full" not in table.page_cells({"job": "0", "status": "completed", "heads_focus": four})["heads_focus"]
    big = table.page_cells({"job": "0", "status": "completed", "final_loss": 10 ** 400})["final_loss"]
    assert (big["text"], big["full"]) == ("1" + "0" * 46 + "…", "1" + "0" * 400)  # a cut number too


def test_paths_the_commands_print_are_printable(default_run, tmp_path, capsys):
    """``report: PATH``, ``csv: PATH`` and ``figure: PATH`` show the user's path printable."""
    from attnlab.commands import compare

    out = tmp_path / "a\x1b[31mb.html"
    assert report_command.main([str(default_run), "-o", str(out)]) == 0
    assert compare.main([str(default_run), "--csv", str(tmp_path / "c\x1b[31m.csv")]) == 0
    printed = capsys.readouterr().out
    assert "\x1b" not in printed and "a\\x1b[31mb.html (1 run" in printed and "c\\x1b[31m.csv" in printed


def test_a_value_only_a_resolver_gives_is_shown_as_the_run_recorded_it(tmp_path):
    """The heads preset's Hydra file keeps ``d_k: ${attnlab.per_head:4,${model.n_heads}}``; the page
    shows the config summary.json recorded (d_k 2); without one, Hydra's file with its plain
    references looked up and every other interpolation as text."""
    cfg = {"task": "train", "model": {"d_model": 6, "n_heads": 2, "d_k": "${attnlab.per_head:4,${model.n_heads}}",
                                      "d_v": "${model.d_model}"}}
    run = write_synthetic_run(tmp_path / "run", ["a", "b", "c"], [0, 2], config=cfg)
    summary = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    summary["config"] = {"task": "train", "model": {"d_model": 6, "n_heads": 2, "d_k": 2, "d_v": 6}}
    (run / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    assert report_data.load_run(run)["config"]["model"] == {"d_model": 6, "n_heads": 2, "d_k": 2, "d_v": 6}
    del summary["config"]
    (run / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    assert report_data.load_run(run)["config"]["model"] == cfg["model"]  # a resolver: nothing looked up
    cfg["model"]["d_k"] = 3
    run = write_synthetic_run(tmp_path / "plain", ["a", "b", "c"], [0, 2], config=cfg)
    assert report_data.load_run(run)["config"]["model"] == {"d_model": 6, "n_heads": 2, "d_k": 3, "d_v": 6}


def test_the_report_never_writes_into_a_run_it_reads(default_run, tmp_path, capsys):
    before = sorted(p.name for p in default_run.iterdir())
    assert report_command.main([str(default_run), "-o", str(default_run / "summary.json")]) == 2
    err = capsys.readouterr().err
    assert err == (f"attnlab-report: error: -o {default_run / 'summary.json'}: inside the run dir "
                   f"{default_run.resolve()} it reads; choose a path outside it\n")
    assert sorted(p.name for p in default_run.iterdir()) == before
    assert report_command.main([str(default_run), "-o", str(default_run)]) in (0, 1)  # the run's own report.html


@pytest.mark.parametrize("overrides", [
    (),  # §5, one head
    ("model.n_heads=2", "train.steps=40", "train.focus_token=starts"),
    ("train.objective=next_token", "train.steps=30", "train.snapshot_every=5"),
    ("experiment=gpt", "train.steps=6", "train.snapshot_steps=[0,3,5]", "analysis.prompt=null"),
    ("experiment=tutorial_walkthrough",),
    ("experiment=exercise5", "model.positional=none"),
    ("train.steps=2100", "train.snapshot_every=300"),  # more losses than the page's curve keeps: thinned
], ids=["section5", "heads", "next_token", "gpt", "walkthrough", "exercise5", "thinned"])
def test_a_runs_own_page_is_the_page_its_files_give(tmp_path, overrides):
    """The job makes its report.html from what the run holds (report_data.run_record, nothing read back);
    it is byte for byte the page attnlab's reader of run dirs makes of the files the run wrote."""
    run = tmp_path / "run"
    cfg = compose_cfg("logging=off", "logging.console=false", "logging.report=true", *overrides)
    assert run_job(cfg, run).status == "completed"
    own = (run / "report.html").read_text(encoding="utf-8")
    assert own == report.render([report_data.load_run(run)])
    data = page_data(run / "report.html")["runs"][0]
    assert data["steps"] and data["tokens"] and data["table"]
