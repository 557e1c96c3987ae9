"""The printed examples of README.md, README.zh-CN.md and docs/reference.md are a real run's output: each
block is compared with what the command prints now, the parts that hold on every CPU exactly (the §5
lines, the final loss's 4 digits, the table) and the wall time and folders as their shape. The blocks
are written by ``python tests/test_doc_examples.py`` (it runs the commands and rewrites them)."""
from __future__ import annotations

import re
import sys
from pathlib import Path

from conftest import ROOT, run_here

# (document, the command line its block shows after "$ ", the arguments run, what masks a varying part)
SWEEP = ("docs/reference.md", "attnlab -m model.d_model=6,0 logging=off", ("-m", "model.d_model=6,0", "logging=off"))
QUICK_START = {"README.md": "en", "README.zh-CN.md": "zh"}  # the block after the make run line, by language


def masked(text: str) -> str:
    """``text`` with what differs between runs of one command made uniform: wall times, folders, dates."""
    text = re.sub(r"(outputs/(?:multirun/)?)\S+", r"\1...", text)
    text = re.sub(r"\d+\.\d\d (s|秒)", r"X.XX \1", text)
    lines = text.splitlines()
    for i in range(1, len(lines)):  # a table: its "seconds" column (spans from the dashes under the header)
        spans = [m.span() for m in re.finditer(r"-+", lines[i])] if re.fullmatch(r"[- ]+", lines[i]) else []
        seconds = [(a, b) for a, b in spans if lines[i - 1][a:b].strip() == "seconds"]
        for a, b in seconds:
            for j in range(i + 1, len(lines)):
                if lines[j].strip():
                    lines[j] = lines[j][:a] + "X".rjust(b - a) + lines[j][b:]
    return "\n".join(lines)


def block_after(doc: str, command: str) -> str:
    """The lines of the code block that starts ``$ command`` in ``doc``, up to its closing fence."""
    text = (ROOT / doc).read_text(encoding="utf-8")
    start = text.index(f"$ {command}\n") + len(f"$ {command}\n")
    return text[start:text.index("```", start)]


def sweep_output(sweep_dir: Path) -> str:
    """What ``attnlab -m model.d_model=6,0 logging=off`` prints (Hydra's launch lines as ``...``)."""
    proc = run_here(*SWEEP[2], f"hydra.sweep.dir={sweep_dir}")  # (conftest: LANGUAGE=en)
    assert proc.returncode == 1, proc.stderr  # one job refused: the sweep says so
    table = proc.stdout[proc.stdout.index("\njob "):].strip("\n")
    return "...\n" + table.replace(str(sweep_dir), "outputs/multirun/...") + "\n"


def quick_start(lang: str, run_dir: Path) -> str:
    proc = run_here(f"lang={lang}", "logging=off", f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.replace(str(run_dir), "outputs/2026-12-01/10-00-00.123456")


def test_the_sweep_table_example_is_a_runs(tmp_path):
    assert masked(block_after(SWEEP[0], SWEEP[1])) == masked(sweep_output(tmp_path / "sweep"))


def test_the_quick_start_lines_are_a_runs(tmp_path):
    for doc, lang in QUICK_START.items():
        text = (ROOT / doc).read_text(encoding="utf-8")
        shown = re.search(r"```\n(step   0 .*?)```", text, re.S).group(1)
        assert masked(shown) == masked(quick_start(lang, tmp_path / lang)), doc


def write() -> None:
    """Rewrite each example block from a run made now."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        doc, command, _args = SWEEP
        text = (ROOT / doc).read_text(encoding="utf-8")
        old = block_after(doc, command)
        (ROOT / doc).write_text(text.replace(f"$ {command}\n{old}", f"$ {command}\n{sweep_output(Path(tmp) / 's')}"),
                                encoding="utf-8")
        for doc, lang in QUICK_START.items():
            text = (ROOT / doc).read_text(encoding="utf-8")
            old = re.search(r"```\n(step   0 .*?)```", text, re.S).group(1)
            new = quick_start(lang, Path(tmp) / lang)
            (ROOT / doc).write_text(text.replace(old, re.sub(r"\d+\.\d\d (s|秒)", r"1.53 \1", new)), encoding="utf-8")
            print(f"wrote {doc}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    write()
