"""One rule for every path a command writes where the user points it (attnlab.outputs.destination):
a regular file, replaced only when attnlab wrote it or with --force; a device, FIFO, symbolic link,
socket or folder refused in one line, left as it was."""
from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from attnlab.commands import check, compare, reproduce
from attnlab.commands import report as report_command
from attnlab.outputs import destination

FIFO = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")


def entries(tmp_path: Path) -> dict[str, Path]:
    """One path of each kind attnlab must not write: a FIFO, a link to a file, a dangling link, a
    link to a terminal-like stream, a folder, a file someone else wrote, and a device when root."""
    victim = tmp_path / "victim.txt"
    victim.write_text("someone's notes\n")
    made = {"link": tmp_path / "link.csv", "dangling": tmp_path / "dangling.csv", "stdout": tmp_path / "out.csv",
            "folder": tmp_path / "folder.csv", "theirs": tmp_path / "theirs.csv"}
    made["link"].symlink_to(victim)
    made["dangling"].symlink_to(tmp_path / "nowhere")
    made["stdout"].symlink_to("/proc/self/fd/1")
    made["folder"].mkdir()
    made["theirs"].write_text("name,grade\nAda,A\n")
    if hasattr(os, "mkfifo"):
        made["fifo"] = tmp_path / "fifo.csv"
        os.mkfifo(made["fifo"])
    if hasattr(os, "mknod") and os.geteuid() == 0:
        made["device"] = tmp_path / "mynull"
        os.mknod(made["device"], stat.S_IFCHR | 0o666, os.makedev(1, 3))
    return made


def snapshot(path: Path) -> tuple:
    st = os.lstat(path)
    return (stat.S_IFMT(st.st_mode), st.st_ino, path.read_bytes() if stat.S_ISREG(st.st_mode) else None)


@pytest.mark.parametrize("kind", ["csv", "page", "figure", None])
def test_every_kind_of_entry_but_a_file_attnlab_wrote_is_refused(tmp_path, kind):
    made = entries(tmp_path)
    expected = {"link": "a symbolic link", "dangling": "a symbolic link", "stdout": "a symbolic link",
                "folder": "a folder", "fifo": "a FIFO", "device": "a device", "theirs": "exists"}
    for name, path in made.items():
        before = snapshot(path)
        line = destination.refusal(path, key="--csv", kind=kind)
        assert line is not None and line.startswith(f"--csv {path}: ") and expected[name] in line, (name, line)
        assert "\n" not in line
        with pytest.raises(destination.OutputRefused):
            destination.write(path, b"job,x\n", key="--csv", kind=kind, force=name != "theirs")
        assert snapshot(path) == before, name  # --force never replaces what is no regular file
    assert (tmp_path / "victim.txt").read_text() == "someone's notes\n"


def test_a_file_attnlab_wrote_is_replaced_and_force_replaces_another(tmp_path):
    ours, theirs = tmp_path / "table.csv", tmp_path / "theirs.csv"
    destination.write(ours, b"job,final_loss\n0,1.5\n", key="--csv", kind="csv")
    destination.write(ours, b"job,final_loss\n0,0.5\n", key="--csv", kind="csv")  # ours: replaced
    assert ours.read_bytes() == b"job,final_loss\n0,0.5\n"
    theirs.write_text("name,grade\n")
    assert "--force replaces it" in destination.refusal(theirs, key="--csv", kind="csv")
    destination.write(theirs, b"job\n", key="--csv", kind="csv", force=True)
    assert theirs.read_bytes() == b"job\n"
    assert "the folder" in destination.refusal(tmp_path / "no" / "x.csv", key="--csv", kind="csv")


def test_report_without_o_keeps_a_page_attnlab_never_wrote(report_sweep, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    page = tmp_path / "report.html"
    page.write_text("<html>my homework</html>")
    assert report_command.main([str(report_sweep)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "report.html: exists and attnlab did not write it" in err
    assert page.read_text() == "<html>my homework</html>"
    assert report_command.main([str(report_sweep), "--force"]) == 0
    assert report_command.main([str(report_sweep)]) == 0  # the page attnlab wrote is replaced without asking
    assert page.read_text().startswith("<!doctype html>\n<!-- attnlab report")


def test_report_refuses_a_device_a_fifo_and_a_link(report_sweep, tmp_path, capsys):
    for name, path in entries(tmp_path).items():
        if name in ("folder", "theirs"):  # -o FOLDER writes FOLDER/report.html
            continue
        before = snapshot(path)
        assert report_command.main([str(report_sweep), "-o", str(path), "--force"]) == 2, name
        assert capsys.readouterr().err.count("\n") == 1
        assert snapshot(path) == before


def test_compare_csv_and_plot_follow_the_rule(report_sweep, tmp_path, capsys):
    made = entries(tmp_path)
    for option in ("--csv", "--plot"):
        for name in ("stdout", "fifo", "theirs"):
            if name in made:
                before = snapshot(made[name])
                assert compare.main([str(report_sweep), option, str(made[name])]) == 2, (option, name)
                [line] = capsys.readouterr().err.splitlines()
                assert line.startswith(f"attnlab-compare: error: {option} {made[name]}: ")
                assert snapshot(made[name]) == before
    csv, png = tmp_path / "t.csv", tmp_path / "t.png"
    for _ in range(2):  # the second time over its own files
        assert compare.main([str(report_sweep), "--csv", str(csv), "--plot", str(png)]) == 0
    capsys.readouterr()
    assert csv.read_text().startswith("job,") and b"Software\x00attnlab" in png.read_bytes()[:4096]
    theirs = tmp_path / "photo.png"
    theirs.write_bytes(b"\x89PNG\r\n\x1a\n not attnlab's")
    assert compare.main([str(report_sweep), "--plot", str(theirs)]) == 2
    assert theirs.read_bytes() == b"\x89PNG\r\n\x1a\n not attnlab's"


@FIFO
def test_reproduce_csv_is_refused_before_any_run(report_sweep, tmp_path, capsys):
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    out = tmp_path / "repro"
    assert reproduce.main([str(report_sweep), "--csv", str(fifo), "--out", str(out)]) == 2
    assert "a FIFO" in capsys.readouterr().err and not out.exists() and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_check_template_writes_a_new_regular_file_only(tmp_path, capsys):
    made = entries(tmp_path)
    for name, path in made.items():
        before = snapshot(path)
        assert check.main(["--template", str(path)]) == 2, name
        assert capsys.readouterr().err.count("\n") == 1
        assert snapshot(path) == before
    assert not (tmp_path / "nowhere").exists()  # a dangling link's target is not created either


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX devices")
def test_dev_null_itself_is_never_replaced(tmp_path):
    before = os.lstat("/dev/null")
    assert "a device" in destination.refusal(Path("/dev/null"), key="-o", kind="page", force=True)
    with pytest.raises(destination.OutputRefused):
        destination.write("/dev/null", b"x", key="-o", kind="page", force=True)
    assert os.lstat("/dev/null").st_ino == before.st_ino
