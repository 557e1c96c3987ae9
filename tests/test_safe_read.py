"""attnlab.saved.safe_read over the broken and hostile run dirs of tests/hostile_runs.py: each case's
one-line refusal or value, nothing outside the run dir read or written, reads bounded (bytes read
and decompressed, never time); on healthy runs the readers agree with numpy, json and PyYAML."""
from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import hostile_runs as H
import numpy as np
import pytest
import yaml

from attnlab.core import files
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


@pytest.mark.parametrize("walk", ["openat", "lstat"])  # POSIX's walk, and the one Windows takes
@pytest.mark.parametrize("case", H.CASES, ids=[c.name for c in H.CASES])
def test_corpus_case(case, walk, healthy, outside, tmp_path, monkeypatch):
    monkeypatch.setattr(files, "_OPENAT", walk == "openat")
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


def test_corpus_covers_every_kind_and_every_reader():
    kinds = {c.kind for c in H.CASES}
    assert kinds == {"code", "secret", "bomb", "file", "summary", "metrics", "npz", "text", "value", "damaged"}
    assert {c.reader for c in H.CASES} == set(H.READERS)


# ----------------------------------------------------------------------------- healthy runs
def test_readers_agree_with_numpy_and_json_on_a_healthy_run(healthy):
    """Differential: the bounded readers return what np.load / json / csv return for our own runs."""
    run, walk = healthy["train"], healthy["walkthrough"]
    assert S.read_summary(run) == json.loads((run / "summary.json").read_text())
    steps, losses = S.read_run_metrics(run)
    ref = np.loadtxt(run / "metrics.csv", delimiter=",", skiprows=1, ndmin=2)
    assert np.array_equal(steps, ref[:, 0].astype(np.int64))
    assert np.array_equal(losses, ref[:, 1])
    assert f"{losses[0]:.4f}" == "2.3566"  # the tutorial's step-0 loss, as printed
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
        assert npz.shapes == {k: ref[k].shape for k in ref}
        with pytest.raises(S.RunFileError, match="attention.npz: no member layers.npy"):
            npz.read("layers")  # a GPT's every block: none in the tutorial's run
    with np.load(walk / "walkthrough.npz") as f:
        wref = {k: f[k] for k in f.files}
    wgot = S.read_walkthrough(walk)
    assert set(wgot) == set(wref)
    assert all(np.array_equal(wgot[k], wref[k]) for k in wref)
    cfg = S.read_config(run)
    assert cfg["model"] == {"d_model": 6, "d_k": 4, "d_v": 6, "init_std": 1.0, "positional": "learned", "n_heads": 1,
                            "causal": False, "dropout": 0.0, "qkv_bias": False, "attention": "explicit",
                            "out_proj": "auto", "n_layers": 0, "d_ff": None, "context": None}
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
    S.read_last_snapshot(run)  # the directory, 4 .npy headers, then steps (3,) int64 and weights (3, 1, 6, 6) float32
    assert S.counters()["bytes_read"] <= 2 * (run / "attention.npz").stat().st_size
    assert S.counters()["bytes_decompressed"] == 3 * 8 + 3 * 6 * 6 * 4


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
    assert np.array_equal(S.read_last_snapshot(run)[1], ref["weights"][-1])
    S.read_npz(run / "attention.npz", S.ATTENTION_MEMBERS, strict=True)


def test_a_crc_error_anywhere_in_a_member_is_one_line(tmp_path):
    run = tmp_path / "big"
    run.mkdir()
    S_, T = 20, 32  # 80 KB of weights: more than zipfile's 4 KB read-ahead
    artifacts.atomic_write(run / "attention.npz", dict(steps=np.arange(S_, dtype=np.int64),
                           weights=np.ones((S_, 1, T, T), dtype=np.float32), tokens=np.array(["t"] * T),
                           token_ids=np.arange(T, dtype=np.int64)))
    H.flip_byte("attention.npz", "weights.npy", lambda n: H.T_HEADER + 4)(run, tmp_path)  # in the first frame
    crc = f"{run / 'attention.npz'}: damaged archive (BadZipFile: Bad CRC-32 for file 'weights.npy')"
    for read in (S.read_attention, S.read_last_snapshot):
        with pytest.raises(S.RunFileError) as info:
            read(run)
        assert str(info.value) == crc
    with pytest.raises(S.RunFileError, match="Bad CRC-32"):
        S.read_npz(run / "attention.npz", S.ATTENTION_MEMBERS, strict=True)


def test_a_job_folder_that_is_a_link_is_refused_when_read_from_its_sweep(healthy, outside, tmp_path):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    os.symlink(healthy["train"], sweep / "0_job")
    with pytest.raises(S.RunFileError, match=r"0_job/summary.json: its folder 0_job is a symbolic link"):
        S.read_summary(sweep / "0_job", root=sweep)
    assert S.read_summary(sweep / "0_job")["status"] == "completed"  # the path a user typed may be a link


HEALTHY_YAML = {  # what a run's .hydra files hold: PyYAML's safe_load reads the same
    "empty": "", "comment": "# nothing\n", "scalar": "3\n", "null": "~\n",
    "types": "a: 1.5e-3\nb: .inf\nd: 0x1F\nf: yes\ng: 'x'\nh: ${model.d_model}\ni: 1_000\nj: [1, {k: v}]\n",
    "unicode": "sentence: 你的旅程从一步开始 😀\nq: \"\\u00e9\\t\"\n",
    "nested_ok": "a: " + "[" * 30 + "]" * 30 + "\n", "aliases": "a: &a {x: 1}\nb: *a\n",
}


@pytest.mark.parametrize("name", list(HEALTHY_YAML))
def test_healthy_yaml_reads_as_pyyaml_reads_it(name):
    text = HEALTHY_YAML[name]
    assert S.parse_yaml_data(text, "t.yaml") == yaml.safe_load(text)


def test_yaml_reads_dates_as_text_and_floats_as_omegaconf(healthy):
    from omegaconf import OmegaConf

    text = "a: 1e-3\nb: 2001-12-14\n"
    assert S.parse_yaml_data(text) == {"a": 0.001, "b": "2001-12-14"} == OmegaConf.to_container(OmegaConf.create(text))
    for path in healthy["train"].joinpath(".hydra").iterdir():  # a run's own files, as Hydra wrote them
        text = path.read_text(encoding="utf-8")
        assert S.parse_yaml_data(text, path) == yaml.safe_load(text)


def test_the_lstat_walk_refuses_a_file_swapped_or_leading_outside_after_its_check(outside, tmp_path, monkeypatch):
    """(Windows' walk) races: the file replaced between its lstat and its open, and a folder swapped
    for a link out between its lstat and the file's."""
    from attnlab.core.files import RunFileError, open_run_file

    secret = next(p for p in outside.rglob("*") if p.is_file() and p.stat().st_nlink == 1)
    run = tmp_path / "run"
    (run / "d").mkdir(parents=True)
    (run / "d" / secret.name).write_text("{}")
    (run / "summary.json").write_text("{}")
    (run / "metrics.csv").write_text("step,loss\n")
    lstat, open_ = os.lstat, os.open

    def racing_lstat(path, **kw):
        if Path(path) == run / "d" / secret.name:
            (run / "d").rename(run / "d.old")
            (run / "d").symlink_to(secret.parent, target_is_directory=True)
        return lstat(path, **kw)

    def racing_open(path, *args, **kw):
        if Path(path) == run / "summary.json":
            os.replace(run / "metrics.csv", run / "summary.json")
        return open_(path, *args, **kw)

    monkeypatch.setattr(files, "_OPENAT", False)
    monkeypatch.setattr(files, "_NOFOLLOW", 0)  # Windows has no O_NOFOLLOW
    monkeypatch.setattr(os, "lstat", racing_lstat)
    monkeypatch.setattr(os, "open", racing_open)
    with pytest.raises(RunFileError, match="summary.json: was replaced while it was opened"):
        open_run_file(run / "summary.json", 100, root=run)
    with pytest.raises(RunFileError, match=f"{secret.name}: leads outside the run dir"):
        open_run_file(run / "d" / secret.name, 100, root=run)


def test_the_lstat_walk_refuses_a_windows_junction(tmp_path, monkeypatch):
    """A folder that is a reparse point (Windows' junction: lstat says a folder, its attributes say
    REPARSE_POINT) is refused like a link."""
    import stat
    from types import SimpleNamespace

    from attnlab.core.files import RunFileError, open_run_file

    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("a: 1\n")
    monkeypatch.setattr(files, "_OPENAT", False)
    with open_run_file(run / ".hydra" / "config.yaml", 100, root=run) as f:
        assert f.read() == b"a: 1\n"
    lstat = os.lstat

    def junction_lstat(path, **kw):
        st = lstat(path, **kw)
        attributes = stat.FILE_ATTRIBUTE_REPARSE_POINT if Path(path).name == ".hydra" else 0
        return SimpleNamespace(st_mode=st.st_mode, st_file_attributes=attributes)

    monkeypatch.setattr(os, "lstat", junction_lstat)
    with pytest.raises(RunFileError, match=r"config.yaml: its folder .hydra is a symbolic link \(refused"):
        open_run_file(run / ".hydra" / "config.yaml", 100, root=run)
