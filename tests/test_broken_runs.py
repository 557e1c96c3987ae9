"""One damaged run never hides the others: every case of the corpus
(tests/hostile_runs.py) put in a sweep beside a healthy run, read by attnlab-compare (the rows the
end-of-sweep table shares), by the report and by attnlab-report. The damaged run is a row (a
record) with its status and a one-line reason naming the file; the healthy run is intact; the
table, the CSV and the page are written; the exit status is 1 exactly when a file cannot be read;
no traceback, no raw control character, no secret anywhere."""
from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import hostile_runs as H
import numpy as np
import pytest
from report_helpers import page_data

from attnlab.commands import compare, sweep
from attnlab.commands import report as report_command
from attnlab.saved import report_data, runs, table
from attnlab.saved import safe_read as S

# read_config's checks of ${...}: compare and the report never resolve anything, so for them these stay text
REFERENCE_CHECKS = ("holds an interpolation", "refers to", "form a cycle", "a chain of more than")
# cases that break a second file a row reads: its line follows the case's own
ALSO_BROKEN = {"hydra_folder_symlink_outside": [
    ".hydra/overrides.yaml: its folder .hydra is a symbolic link (refused: a run dir holds no links)"],
    "status_escape_sequences": ["summary.json: unknown status '\\x1b[2Jrunning' (attnlab writes running, completed, "
                                "diverged, interrupted, failed)"]}
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
CASES = [c for c in H.CASES]


def _path(case: H.Case) -> tuple:
    """What decides how compare and the report treat a case (:func:`expected`): its kind and the
    reader a row calls, whether that reader refuses it (a missing file, the tools' limits, a reference
    they keep as text) and whether a second file breaks too."""
    o = case.outcome
    return (case.kind, case.reader, type(o).__name__, getattr(o, "missing", False), case.limit is not None,
            isinstance(o, H.Raises) and any(r in o.fragment for r in REFERENCE_CHECKS), case.name in ALSO_BROKEN)


# one case per path through compare and the report, each beside a healthy run; every case's row is
# checked in test_the_whole_corpus_in_one_sweep, each reader's refusal of every case in test_safe_read
ONE_PER_PATH = list({_path(c): c for c in reversed(CASES)}.values())[::-1]


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    """The corpus's healthy runs as runs of an older attnlab: summary.json without the recorded
    config (as the corpus's runs already are) and without the overrides, so ``.hydra/`` is read."""
    root = tmp_path_factory.mktemp("bases")
    out = {}
    for name, run in H.healthy_runs(tmp_path_factory).items():
        shutil.copytree(run, root / name, symlinks=True)
        summary = json.loads((root / name / S.SUMMARY).read_text(encoding="utf-8"))
        summary.pop("overrides", None)
        summary.pop("config", None)
        (root / name / S.SUMMARY).write_text(json.dumps(summary, indent=2), encoding="utf-8")
        out[name] = root / name
    return out


def damaged_sweep(folder: Path, cases, bases, outside) -> tuple[Path, dict[str, Path]]:
    """``folder`` holding ``0_healthy`` (the healthy training run) and ``N_<case>`` for each case
    (N from 1); cases this machine cannot build are left out."""
    shutil.copytree(bases["train"], folder / "0_healthy", symlinks=True)
    jobs = {}
    for n, case in enumerate(cases, start=1):
        try:
            jobs[case.name] = H.build_case(case, bases, folder / f"{n}_{case.name}", outside)
        except H.Unsupported:
            shutil.rmtree(folder / f"{n}_{case.name}", ignore_errors=True)
    return folder, jobs


def expected(case: H.Case, job: Path) -> tuple[str, str | None, bool]:
    """The (status, error, broken) of the case's row: when the file is one a row reads and its
    reader refuses it (at the tools' default limits), the reason naming the file, and the row is
    broken; else the run's own status and error."""
    o = case.outcome
    refused = (isinstance(o, H.Raises) or case.limit is not None) and case.reader != "job_num" and not (
        case.reader == "config" and any(r in o.fragment for r in REFERENCE_CHECKS))
    if refused:
        if isinstance(o, H.Raises) and o.missing and o.file == S.SUMMARY:
            return "missing", runs.NO_SUMMARY, True
        try:
            H.READERS[case.reader](job, None)
        except S.RunFileError as err:
            if case.limit is None:
                assert o.fragment in str(err)
            if err.path.endswith(S.SUMMARY):
                return "unreadable", S.file_problem(err, job), True
            summary = json.loads((job / S.SUMMARY).read_text(encoding="utf-8"))
            problems = [S.file_problem(err, job), *ALSO_BROKEN.get(case.name, [])]
            return summary["status"], "; ".join(x for x in [summary.get("error"), *problems] if x), True
    summary = json.loads((job / S.SUMMARY).read_text(encoding="utf-8"))
    also = ALSO_BROKEN.get(case.name, [])  # a file every reader accepts, with a value no run writes
    return summary["status"], "; ".join(x for x in [summary.get("error"), *also] if x) or None, bool(also)


def csv_cell(text: str | None) -> str:
    if text is None:
        return ""
    shown = S.printable(text, table.CSV_TEXT_LIMIT)
    return "'" + shown if shown.startswith(table.FORMULA_START) else shown


def assert_healthy_row(row: dict, healthy: Path) -> None:
    summary = json.loads((healthy / S.SUMMARY).read_text(encoding="utf-8"))
    with np.load(healthy / S.ATTENTION) as npz:
        last = npz["weights"][-1].mean(axis=0)
    assert row["status"] == "completed" and row["error"] is None and row["problems"] == []
    assert row["overrides"] == " ".join(H.TRAIN_OVERRIDES)
    assert (row["final_loss"], row["steps_run"], row["wall_time_s"]) == (
        summary["final_loss"], 40, summary["wall_time_s"])
    assert (row["focus_token"], row["focus_target"], row["snapshot_step"]) == (" journey", "Your", 39)
    assert row["focus_weight"] == pytest.approx(float(last[1].max()), rel=1e-6)
    assert row["loss_threshold"] == 0.001


def assert_healthy_record(rec: dict, healthy: Path) -> None:
    with np.load(healthy / S.ATTENTION) as npz:
        weights = npz["weights"]
    assert rec["status"] == "completed" and rec["error"] is None and rec["problems"] == []
    assert rec["steps"] == [0, 10, 39] and rec["loss"]["total"] == 40
    assert np.abs(np.asarray(rec["weights"]) - weights).max() <= 5.0001e-5
    assert rec["overrides"] == list(H.TRAIN_OVERRIDES)


@pytest.mark.parametrize("case", ONE_PER_PATH, ids=[c.name for c in ONE_PER_PATH])
def test_a_damaged_run_is_one_row_and_one_record_beside_a_healthy_one(case, bases, outside, tmp_path, capsys,
                                                                       monkeypatch):
    secret = H.session_secret()
    monkeypatch.setenv(H.SECRET_ENV, secret)
    folder, jobs = damaged_sweep(tmp_path / "sweep", [case], bases, outside)
    if case.name not in jobs:
        pytest.skip("this machine cannot build the case")
    job = jobs[case.name]
    status, error, broken = expected(case, job)

    # the rows (attnlab-compare and the end-of-sweep table)
    rows = runs.collect_rows([folder])
    assert [r["job"] for r in rows] == ["0_healthy", f"1_{case.name}"]
    assert_healthy_row(rows[0], folder / "0_healthy")
    assert (rows[1]["status"], rows[1]["error"]) == (status, error)
    assert runs.broken(rows[1]) == broken
    assert "cannot be read (" not in (rows[1]["error"] or "")  # job_row's last resort never needed

    # attnlab-compare: the table, the CSV, exit 1 for a broken run, no traceback
    out_csv = tmp_path / "cmp.csv"
    code = compare.main([str(folder), "--csv", str(out_csv)])
    seen = capsys.readouterr()
    assert code == (1 if broken else 0), seen.err
    lines = seen.out.splitlines()
    assert lines[2].startswith("0_healthy ") and " completed " in lines[2]
    assert lines[3].startswith(f"1_{case.name} ") and lines[-1] == f"csv: {out_csv}"
    warnings = [f"attnlab-compare: warning: 1_{case.name}: {S.printable('; '.join(rows[1]['problems']), 1500)}"]
    assert seen.err.splitlines() == (warnings if broken else [])
    with open(out_csv, encoding="utf-8", newline="") as f:
        cells = list(csv.DictReader(f))
    assert [c["job"] for c in cells] == ["0_healthy", f"1_{case.name}"]
    assert cells[0]["status"] == "completed" and cells[0]["final_loss"] == repr(rows[0]["final_loss"])
    assert (cells[1]["status"], cells[1]["error"]) == (csv_cell(status), csv_cell(error))
    written = seen.out + seen.err + out_csv.read_text(encoding="utf-8")
    assert not RAW_CONTROL.search(written)
    assert "Traceback" not in written and secret not in written

    # the report: the same status and reason per run, the page written, exit 1 for a broken run
    records = report_data.collect_records([folder])
    assert [r["name"] for r in records] == ["0_healthy", f"1_{case.name}"]
    assert_healthy_record(records[0], folder / "0_healthy")
    assert (records[1]["status"], records[1]["error"]) == (
        S.printable(status, report_data.MAX_STR), None if error is None else S.printable(error, report_data.MAX_STR))
    assert bool(records[1]["problems"]) == broken
    page = tmp_path / "page.html"
    code = report_command.main([str(folder), "-o", str(page)])
    seen = capsys.readouterr()
    assert code == (1 if broken else 0), seen.err
    data = page_data(page)
    assert [r["name"] for r in data["runs"]] == ["0_healthy", f"1_{case.name}"]
    # the page's runs table is attnlab-compare's printed table: its columns, headers and cells
    cols = table.columns_of(rows, table=True)
    assert [(c["key"], c["title"]) for c in data["table_columns"]] == [(c, table.header(c)) for c in cols]
    for rec, row, line in zip(data["runs"], rows, lines[2:4]):
        cells = {c: rec["table"][c]["text"] if c in rec["table"] else "-" for c in cols}
        assert cells == {c: table.cell_text(c, row.get(c)) for c in cols}
        assert all(cells[c] in line for c in cols if c != "job")
    text = page.read_text(encoding="utf-8")
    assert not RAW_CONTROL.search(text.replace("\n", "").replace("\t", ""))
    assert not RAW_CONTROL.search(seen.out + seen.err)
    assert "Traceback" not in seen.err and secret not in text + seen.out + seen.err
    assert not (outside / H.PWNED).exists()


def test_a_recent_run_is_read_from_its_summary_not_from_hydra(bases, outside, tmp_path):
    """summary.json records the config and the overrides: .hydra/ is then not read at all, so a
    hostile overrides.yaml or config.yaml there changes nothing."""
    run = tmp_path / "run"
    shutil.copytree(bases["train"], run, symlinks=True)
    summary = json.loads((run / S.SUMMARY).read_text())
    summary["overrides"] = ["optimizer.lr=0.05", "sentence=\x1b]0;x\x07"]
    summary["config"] = {"train": {"loss_threshold": 0.5, "focus_token": 2}, "tokenizer": {"encoding": "gpt2"}}
    (run / S.SUMMARY).write_text(json.dumps(summary))
    H.symlink(S.OVERRIDES, lambda r, o: o / H.CANARY)(run, outside)
    (run / S.CONFIG).write_text(H.billion_laughs())
    (row,) = runs.collect_rows([run])
    assert row["problems"] == [] and row["error"] is None
    assert row["overrides"] == "optimizer.lr=0.05 sentence=\x1b]0;x\x07"  # as read; shown escaped
    assert row["loss_threshold"] == 0.5 and row["focus_token"] == " starts"
    assert "sentence=\\x1b]0;x\\x07" in table.csv_text([row]) and "\x1b" not in table.format_table([row])


def test_csv_cells_never_start_a_formula(tmp_path):
    rows = [{"job": "=HYPERLINK(\"http://x\")", "status": "+completed", "error": "@SUM(A1)", "overrides": "-1+1",
             "final_loss": -0.5, "steps_run": -3, "path": "p"}]
    cells = next(csv.DictReader(table.csv_text(rows).splitlines()))
    assert (cells["job"], cells["status"], cells["error"], cells["overrides"]) == (
        "'=HYPERLINK(\"http://x\")", "'+completed", "'@SUM(A1)", "'-1+1")
    assert (cells["final_loss"], cells["steps_run"]) == ("-0.5", "-3")  # numbers stay numbers
    assert table.format_table(rows).splitlines()[2].startswith("=HYPERLINK")  # the printed table is no spreadsheet


def test_the_whole_corpus_in_one_sweep(bases, outside, tmp_path, monkeypatch, capsys):
    """Every case at once, through attnlab-compare (in this process; its console script is
    test_compare's), the installed attnlab-report and the end-of-sweep table: one healthy row among
    the damaged ones, each case's row with its status and reason, everything written, exit 1, no
    traceback."""
    secret = H.session_secret()
    monkeypatch.setenv(H.SECRET_ENV, secret)
    folder, jobs = damaged_sweep(tmp_path / "sweep", CASES, bases, outside)
    n = len(jobs) + 1
    want = {f"{i}_{c.name}": expected(c, jobs[c.name]) for i, c in enumerate(CASES, start=1) if c.name in jobs}
    n_broken = sum(broken for _, _, broken in want.values())
    rows = runs.collect_rows([folder])
    assert {r["job"]: (r["status"], r["error"], runs.broken(r)) for r in rows[1:]} == want
    assert not [r["job"] for r in rows if "cannot be read (" in (r["error"] or "")]  # job_row's last resort never needed
    code = compare.main([str(folder), "--csv", str(tmp_path / "all.csv"), "--plot", str(tmp_path / "all.png")])
    proc = subprocess.CompletedProcess("attnlab-compare", code, *capsys.readouterr())
    assert proc.returncode == 1, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert len(lines) == 2 + n + 3 and lines[-2:] == [f"csv: {tmp_path / 'all.csv'}", f"figure: {tmp_path / 'all.png'}"]
    assert " runs, ' journey' at the last snapshot → " in lines[-3]  # the completed runs' distribution
    assert lines[2].startswith("0_healthy ") and " completed " in lines[2]
    # one warning per broken run (matplotlib may add its own about a crowded legend)
    ours = [line for line in proc.stderr.splitlines() if line.startswith("attnlab-compare: ")]
    assert len(ours) == n_broken and all(line.startswith("attnlab-compare: warning: ") for line in ours)
    assert (tmp_path / "all.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with open(tmp_path / "all.csv", encoding="utf-8", newline="") as f:
        assert len(list(csv.DictReader(f))) == n
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg", H.SECRET_ENV: secret}
    proc2 = subprocess.run([str(Path(sys.executable).parent / "attnlab-report"), str(folder), "-o",
                            str(tmp_path / "all.html")], capture_output=True, text=True, env=env, timeout=600)
    assert proc2.returncode == 1, proc2.stderr[-2000:]
    records = page_data(tmp_path / "all.html")["runs"]
    assert len(records) == n and records[0]["name"] == "0_healthy"
    assert_healthy_record(records[0], folder / "0_healthy")
    assert len(proc2.stderr.splitlines()) == n_broken
    written = proc.stdout + proc.stderr + proc2.stdout + proc2.stderr + (tmp_path / "all.csv").read_text()
    assert "Traceback" not in written and secret not in written and not RAW_CONTROL.search(written)
    # the end-of-sweep table reads the same rows
    assert sweep.summarize(folder) == 1
    assert (folder / "summary.csv").read_text(encoding="utf-8") == (tmp_path / "all.csv").read_text(encoding="utf-8")
    assert not (outside / H.PWNED).exists()


def test_a_job_folder_that_is_a_link_is_a_row_and_nothing_is_read_through_it(bases, outside, tmp_path, capsys):
    folder = tmp_path / "sweep"
    shutil.copytree(bases["train"], folder / "0_healthy", symlinks=True)
    shutil.copytree(bases["train"], outside / "elsewhere", symlinks=True)
    os.symlink(outside / "elsewhere", folder / "1_link")
    reason = "1_link: is a symbolic link (refused: nothing in a sweep dir is read through a link)"
    S.reset_counters()
    assert runs.job_row(folder / "0_healthy")["error"] is None
    one_row = S.counters()["bytes_read"]
    S.reset_counters()
    rows = runs.collect_rows([folder])
    assert [(r["job"], r["status"], r["error"]) for r in rows] == [
        ("0_healthy", "completed", None), ("1_link", "unreadable", reason)]
    # the healthy row and its job number (summary.json read once, then hydra.yaml: a run made by
    # the API records no job number): not one byte of the linked run
    assert S.counters()["bytes_read"] == one_row + (folder / "0_healthy" / S.HYDRA).stat().st_size
    table_bytes = S.counters()["bytes_read"]
    S.reset_counters()
    assert compare.main([str(folder)]) == 1
    assert S.counters()["bytes_read"] == table_bytes  # attnlab-compare reads each run once, as the table does
    assert capsys.readouterr().err == f"attnlab-compare: warning: 1_link: {reason}\n"
    records = report_data.collect_records([folder])
    assert (records[1]["status"], records[1]["error"], records[1]["weights"]) == ("unreadable", reason, [])
    (run,) = runs.collect_rows([folder / "1_link"])  # the PATH you type may be a link
    assert run["status"] == "completed" and run["error"] is None
