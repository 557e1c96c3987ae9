"""attnlab.saved.safe_read over the corpus of broken and hostile run dirs (tests/hostile_runs.py): every
case's exact outcome, nothing outside the run dir read or written, reads bounded by construction
(bytes read and decompressed, never time), and the readers agree with numpy/json on healthy runs."""
from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import hostile_runs as H
import numpy as np
import pytest
import yaml

from attnlab.outputs import artifacts
from attnlab.saved import safe_read as S


def snapshot(folder: Path) -> dict[str, tuple[str, bytes]]:
    """Every entry below ``folder`` (links not followed): its kind and, for files, bytes."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            if p.is_symlink():
                out[str(p)] = ("link", os.readlink(p).encode())
            elif p.is_file():
                out[str(p)] = ("file", p.read_bytes())
            else:
                out[str(p)] = ("dir", b"")
    return out


def tree_size(run: Path) -> int:
    """Bytes of the regular files of ``run`` (lstat: links and FIFOs count 0)."""
    total = 0
    for dirpath, _, filenames in os.walk(run):
        for name in filenames:
            p = Path(dirpath) / name
            total += p.stat().st_size if p.is_file() and not p.is_symlink() else 0
    return total


@pytest.mark.parametrize("case", H.CASES, ids=[c.name for c in H.CASES])
def test_corpus_case(case, healthy, outside, tmp_path, monkeypatch):
    secret = H.session_secret()
    monkeypatch.setenv(H.SECRET_ENV, secret)
    try:
        run = H.build_case(case, healthy, tmp_path / "run", outside)
    except H.Unsupported as err:
        pytest.skip(str(err))
    before = snapshot(outside)
    size = tree_size(run)
    S.reset_counters()
    read = H.READERS[case.reader]
    if isinstance(case.outcome, H.Raises):
        with pytest.raises(S.RunFileError) as info:
            read(run, case.limit)
        msg = str(info.value)
        assert msg.startswith(f"{run / case.outcome.file}: "), msg
        assert case.outcome.fragment in msg, msg
        assert "\n" not in msg
        assert "\x1b" not in msg
        assert "\x07" not in msg
        assert isinstance(info.value, S.MissingRunFile) == case.outcome.missing
        shown = msg
    else:
        result = read(run, case.limit)
        assert case.outcome.view(result) == case.outcome.expected
        shown = repr(result)
    used = S.counters()
    assert used["bytes_read"] <= (case.max_read if case.max_read is not None else size), used
    assert used["bytes_decompressed"] <= case.max_decompressed, used
    assert secret not in shown  # neither the canary's content nor the environment's secret
    assert snapshot(outside) == before  # nothing outside the run dir written
    assert not (outside / H.PWNED).exists()


def test_corpus_covers_every_kind_of_the_issue():
    kinds = {c.kind for c in H.CASES}
    assert kinds >= {"code", "secret", "bomb", "file", "summary", "metrics", "npz", "text", "value", "damaged"}
    readers = {c.reader for c in H.CASES}
    assert readers == set(H.READERS)
    assert len(H.CASES) >= 100


def test_corpus_script_writes_every_case(tmp_path):
    """``python tests/hostile_runs.py OUT`` writes the corpus (checked on a few cases)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, str(Path(H.__file__)), str(tmp_path / "corpus")], capture_output=True,
                          text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == len(H.CASES)
    assert "billion_laughs [bomb]: config raises: .hydra/config.yaml: refused YAML: aliases expand" in proc.stdout
    assert os.readlink(tmp_path / "corpus" / "summary_symlink_to_dev_zero" / "summary.json") == "/dev/zero"
    assert (tmp_path / "corpus" / "config_50_mb" / ".hydra" / "config.yaml").stat().st_size == 50 * 1024 * 1024


# ----------------------------------------------------------------------------- healthy runs
def test_readers_agree_with_numpy_and_json_on_a_healthy_run(healthy):
    """Differential: the bounded readers return what np.load / json / csv return for our own runs."""
    run, walk = healthy["train"], healthy["walkthrough"]
    assert S.read_summary(run) == json.loads((run / "summary.json").read_text())
    steps, losses = S.read_run_metrics(run)
    ref_steps, ref_losses = artifacts.read_metrics(run)
    assert np.array_equal(steps, ref_steps)
    assert np.array_equal(losses, ref_losses)
    assert losses[0] == 2.3566272258758545  # the tutorial's step-0 loss
    with np.load(run / "attention.npz") as f:
        ref = {k: f[k] for k in f.files}
    got = S.read_attention(run)
    assert set(got) == set(ref)
    assert all(np.array_equal(got[k], ref[k]) and got[k].dtype == ref[k].dtype for k in ref)
    step, frame = S.read_last_snapshot(run)
    assert step == 39
    assert np.array_equal(frame, ref["weights"][-1])
    with S.open_attention(run) as npz:
        assert [int(s) for s in npz.read("steps")] == [0, 10, 39]
        assert all(np.array_equal(a, b) for a, b in zip(npz.frames("weights"), ref["weights"]))
        assert np.array_equal(npz.read_frame("weights", 1), ref["weights"][1])
        with pytest.raises(S.RunFileError, match="weights has 3 frames; no frame 3"):
            npz.read_frame("weights", 3)
    with np.load(walk / "walkthrough.npz") as f:
        wref = {k: f[k] for k in f.files}
    wgot = S.read_walkthrough(walk)
    assert set(wgot) == set(wref)
    assert all(np.array_equal(wgot[k], wref[k]) for k in wref)
    cfg = S.read_config(run)
    assert cfg["model"] == {"d_model": 6, "d_k": 4, "d_v": 6, "init_std": 1.0, "positional": "learned", "n_heads": 1,
                            "causal": False, "dropout": 0.0, "qkv_bias": False, "attention": "explicit",
                            "out_proj": "auto"}
    assert cfg["optimizer"]["betas"] == [0.9, 0.999]
    assert cfg["optimizer"]["eps"] == 1e-08
    assert S.read_overrides(run) == list(H.TRAIN_OVERRIDES)
    assert S.read_job_num(run) == 0


def test_reading_a_healthy_run_reads_each_file_about_once(healthy):
    run = healthy["train"]
    S.reset_counters()
    S.read_summary(run)
    assert S.counters()["bytes_read"] == (run / "summary.json").stat().st_size
    S.reset_counters()
    S.read_run_metrics(run)
    assert S.counters()["bytes_read"] == (run / "metrics.csv").stat().st_size
    S.reset_counters()
    S.read_last_snapshot(run)  # central directory, 4 headers, steps, one frame
    size = (run / "attention.npz").stat().st_size
    assert S.counters()["bytes_read"] <= 2 * size
    assert S.counters()["bytes_decompressed"] == 4 * H.T_HEADER + 3 * 8 + 1 * 6 * 6 * 4


def test_last_frame_of_a_large_stored_archive_reads_only_that_frame(tmp_path):
    """1,000 snapshots of T=64: the last frame costs one frame of reading, not the archive."""
    run = tmp_path / "big"
    run.mkdir()
    S_, T = 1000, 64
    weights = np.arange(S_ * T * T, dtype=np.float32).reshape(S_, 1, T, T)
    artifacts.atomic_savez(run / "attention.npz", steps=np.arange(S_, dtype=np.int64), weights=weights,
                           tokens=np.array(["t"] * T), token_ids=np.arange(T, dtype=np.int64))
    S.reset_counters()
    step, frame = S.read_last_snapshot(run)
    assert step == 999
    assert np.array_equal(frame, weights[-1])
    frame_bytes = T * T * 4
    assert S.counters()["bytes_decompressed"] == 4 * H.T_HEADER + S_ * 8 + frame_bytes
    assert S.counters()["bytes_read"] < S_ * 8 + 3 * frame_bytes + 4096  # vs 16 MB of weights


# ----------------------------------------------------------------------------- units
def test_printable_escapes_and_cuts():
    assert S.printable("Your journey 你好 🙂") == "Your journey 你好 🙂"
    assert S.printable("a\x1b[2Jb\x07\x9b\u202e\u2066\ud800\n\t\x7f") == "a\\x1b[2Jb\\x07\\x9b\\u202e\\u2066\\ud800\\n\\t\\x7f"
    assert S.printable("x" * 10, 10) == "x" * 10
    assert S.printable("x" * 11, 10) == "x" * 10 + "…[+1 chars]"
    assert S.printable("\x1b" * 5, 10) == "\\x1b\\x1b…[+3 chars]"  # an escape is never split
    huge = "\x1b" * 10_000_000
    assert len(S.printable(huge, 50)) <= 50 + len("…[+10000000 chars]")
    assert S.printable(None) == "None"
    assert S.printable(3.5) == "3.5"
    assert S.printable(S.printable("\x1b[2J")) == "\\x1b[2J"  # idempotent


def test_interpolations_and_references():
    data = {"a": {"b": 1, "c": "${a.b}"}, "l": ["x", "${oc.env:HOME}"], "s": "plain $ {x}"}
    assert S.interpolations(data) == [("a.c", "${a.b}"), ("l[1]", "${oc.env:HOME}")]
    with pytest.raises(S.RunFileError, match=r"^cfg: l\[1\] holds an interpolation \(\$\{oc.env:HOME\}\); resolvers"):
        S.resolve_references(data, "cfg")
    del data["l"]
    assert S.resolve_references(data, "cfg") == {"a": {"b": 1, "c": 1}, "s": "plain $ {x}"}
    assert data["a"]["c"] == "${a.b}"  # a copy: the input is untouched
    assert S.special_keys({"x": [{"_target_": 1, "_convert_": 2}], "_args_": 3}) == [
        ("_args_", 3), ("x[0]._target_", 1), ("x[0]._convert_", 2)]
    assert S.select({"a": {"b": None}}, "a.b", 5) is None
    assert S.select({"a": 1}, "a.b", 5) == 5


def test_type_problems():
    types = S.SUMMARY_TYPES
    assert S.type_problems({"final_loss": "x"}, types) == ["summary.json: final_loss is a str, expected a number or null"]
    assert S.type_problems({"final_loss": True, "steps_run": 1.0}, types) == [
        "summary.json: final_loss is a bool, expected a number or null",
        "summary.json: steps_run is a float, expected an integer"]
    assert S.type_problems({"final_loss": 1, "steps_run": 3, "unknown": object()}, types) == []
    assert S.type_problems(None, types) == ["summary.json: is null, expected an object"]


def test_paths_must_stay_inside_the_run_dir(healthy, tmp_path):
    run = healthy["train"]
    with pytest.raises(S.RunFileError, match="not inside the run dir"):
        S.read_bytes(tmp_path / "x", 10, root=run)
    with pytest.raises(S.RunFileError, match="not a file path inside the run dir"):
        S.read_bytes(run / ".." / run.name / "summary.json", 10_000, root=run)


def test_a_file_that_grows_after_the_check_is_read_only_to_its_checked_size(healthy, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.csv").write_text("step,loss\n0,1.0\n")
    with S.open_run_file(run / "metrics.csv", 100) as f:
        with open(run / "metrics.csv", "a") as g:
            g.write("1,2.0\n" * 1000)
        assert f.read() == b"step,loss\n0,1.0\n"
        assert f.read() == b""


def test_deflated_members_read_like_stored_ones(healthy, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    with np.load(healthy["train"] / "attention.npz") as f:
        ref = {k: f[k] for k in f.files}
    np.savez_compressed(run / "attention.npz", **ref)
    with zipfile.ZipFile(run / "attention.npz") as zf:
        assert {i.compress_type for i in zf.infolist()} == {zipfile.ZIP_DEFLATED}
    got = S.read_attention(run)
    assert all(np.array_equal(got[k], ref[k]) for k in ref)
    with S.open_attention(run) as npz:
        assert np.array_equal(npz.read_frame("weights", -1), ref["weights"][-1])
        assert np.array_equal(npz.read_frame("weights", 0), ref["weights"][0])
        npz.verify()


def test_one_frame_of_a_large_member_skips_the_crc_and_verify_finds_it(tmp_path):
    """A byte flipped in the first frame: reading the last frame (the sweep table's read) does
    not see it, a full read and verify() (what attnlab-reproduce does first) do."""
    run = tmp_path / "big"
    run.mkdir()
    S_, T = 20, 32  # 80 KB of weights: more than zipfile's 4 KB read-ahead
    weights = np.ones((S_, 1, T, T), dtype=np.float32)
    artifacts.atomic_savez(run / "attention.npz", steps=np.arange(S_, dtype=np.int64), weights=weights,
                           tokens=np.array(["t"] * T), token_ids=np.arange(T, dtype=np.int64))
    H.flip_byte("attention.npz", "weights.npy", lambda n: H.T_HEADER + 4)(run, tmp_path)
    step, frame = S.read_last_snapshot(run)
    assert step == S_ - 1
    assert np.array_equal(frame, weights[-1])
    crc = "attention.npz: damaged archive (BadZipFile: Bad CRC-32 for file 'weights.npy')"
    with pytest.raises(S.RunFileError, match=crc.replace("(", r"\(").replace(")", r"\)")):
        S.read_attention(run)
    with S.open_attention(run) as npz, pytest.raises(S.RunFileError, match="Bad CRC-32"):
        npz.verify()
    with S.open_attention(run) as npz, pytest.raises(S.RunFileError, match="Bad CRC-32"):
        list(npz.frames("weights"))


def test_a_job_folder_that_is_a_link_is_refused_when_read_from_its_sweep(healthy, outside, tmp_path):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    os.symlink(healthy["train"], sweep / "0_job")
    with pytest.raises(S.RunFileError, match=r"0_job/summary.json: its folder 0_job is a symbolic link"):
        S.read_summary(sweep / "0_job", root=sweep)
    assert S.read_summary(sweep / "0_job")["status"] == "completed"  # the path a user typed may be a link


def _outcome(text: str, c_events: bool):
    try:
        return ("data", S.yaml_data.parse_yaml_data(text, "t.yaml", c_events=c_events))
    except S.RunFileError as err:
        return ("refused", str(err))


BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{k}: &{k} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, k in zip("abcdefg", "bcdefgh"))
YAML_TEXTS = {  # what a run's .hydra files hold, and what a damaged or hostile one may
    "empty": "", "comment": "# nothing\n", "scalar": "3\n", "null": "~\n",
    "types": "a: 1e-3\nb: .inf\nc: -.nan\nd: 0x1F\ne: 2001-12-14\nf: yes\ng: 'x'\nh: ${model.d_model}\ni: 1_000\n",
    "unicode": "sentence: 你的旅程从一步开始 😀\nq: \"\\u00e9\\t\\x01\"\n",
    "nested_ok": "a: " + "[" * 30 + "]" * 30 + "\n",
    "too_deep_ours": "a: " + "[" * 40 + "]" * 40 + "\n",
    "too_deep_flow": "[" * 3000 + "]" * 3000 + "\n",
    "too_deep_block": "".join("  " * i + f"k{i}:\n" for i in range(60)) + "  " * 60 + "v: 1\n",
    "bomb": BOMB, "recursive": "a: &a [*a]\n", "many": "[" + ", ".join(["1"] * 6000) + "]\n",
    "python_tag": "x: !!python/object/apply:os.system ['true']\n", "custom_tag": "x: !env HOME\n",
    "binary": "x: !!binary aGVsbG8=\n", "set": "x: !!set {a, b}\n", "merge": "a: &a {x: 1}\nb:\n  <<: *a\n",
    "duplicate": "seed: 1\nseed: 2\n", "null_key": "null: 1\n", "bool_key": "yes: 1\n", "int_key": "3: x\n",
    "complex_key": "? [a, b]\n: 1\n", "two_docs": "a: 1\n---\nb: 2\n", "unclosed": "model: [unclosed\n",
    "tab": "a:\n\tb: 1\n", "control": "a: b\x07c\n", "bom": "\ufeffa: 1\n", "huge_int": "a: " + "9" * 5000 + "\n",
    "bool_tag_maybe": 'a: !!bool "maybe"\n', "int_tag_empty": 'a: !!int ""\n', "float_tag_dash": 'a: !!float "-"\n',
    "sexagesimal": "a: 1" + ":59" * 5000 + "\n", "base60_ok": "a: 1:20\n", "hex_huge": "a: 0x" + "f" * 4000 + "\n",
    "int_4300_digits": "a: " + "9" * 4300 + "\n", "surrogate_escape": 'a: "\\ud800"\n',
    "bad_indent": "a:\n  b: 1\n c: 2\n", "colon": "a: b: c\n", "anchor_only": "a: &x\n", "undefined_alias": "a: *nope\n",
}


@pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML without libyaml: one parser only")
@pytest.mark.parametrize("name", list(YAML_TEXTS))
def test_libyaml_events_read_what_the_pure_python_parser_reads(name):
    """The same data from libyaml's events as from PyYAML's pure-Python parser, and the same
    refusal of a hostile text (ours word for word; a syntax error both call not valid YAML, in
    their own words: libyaml says "did not find expected ',' or ']'")."""
    text = YAML_TEXTS[name]
    fast, slow = _outcome(text, True), _outcome(text, False)
    assert fast[0] == slow[0], (fast, slow)
    if fast[0] == "data":
        assert json.dumps(fast[1], sort_keys=True) == json.dumps(slow[1], sort_keys=True)
    elif "refused YAML" in slow[1] and "refused YAML" in fast[1]:
        assert fast[1] == slow[1]
    elif name == "surrogate_escape":  # libyaml refuses the escape itself; the Python parser makes the surrogate
        assert (fast[1], slow[1]) == ("t.yaml: not valid YAML (line 1: found invalid Unicode character escape code)",
                                      "t.yaml: refused YAML: a lone surrogate in a string (line 1)")
    else:
        assert fast[1].startswith("t.yaml: not valid YAML (") and slow[1].startswith("t.yaml: not valid YAML ("), fast


def test_libyaml_events_read_a_runs_hydra_files_as_the_pure_python_parser(healthy):
    files = [p for p in healthy["train"].joinpath(".hydra").iterdir()]
    assert len(files) == 3
    for path in files:
        text = path.read_text(encoding="utf-8")
        fast = S.yaml_data.parse_yaml_data(text, path)
        assert isinstance(fast, (dict, list)) and fast
        assert fast == S.yaml_data.parse_yaml_data(text, path, c_events=False)
