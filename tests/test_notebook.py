"""The companion notebook (notebooks/attnlab_tutorial.py, jupytext's percent format, built into the .ipynb):
built from its source; executed top to bottom on a real kernel (nbclient, ipykernel) with every network
connection refused and recorded; its outputs checked (the tutorial's five §5 lines in Chinese, the §5
figure, the report in a sandboxed frame, the check's verdicts, the exercises' tables); and the saved
notebook's frame opened in headless Chromium beside a notebook page's own styles.

The execution takes ~20 s: marked ``notebook`` (``make test-notebook``; .ci/run runs it after ``make test``).
Screenshots go under pytest's temporary folder, or ``$ATTNLAB_SCREENSHOTS`` when set.
"""
from __future__ import annotations

import os
import re

import pytest
import test_report_browser

from conftest import ROOT

browser, shots = test_report_browser.browser, test_report_browser.shots  # fixtures: Chromium, the screenshots' folder
SOURCE = ROOT / "notebooks" / "attnlab_tutorial.py"
BUILT = SOURCE.with_suffix(".ipynb")
# tutorial §5's printed lines (seed 42), as the tutorial prints them
TUTORIAL_LINES = """\
step   0  loss=2.3566  |  journey关注: 'Your'=0.22 'journey'=0.12 'starts'=0.13 'with'=0.14 'one'=0.19 'step'=0.21
step  20  loss=0.2104  |  journey关注: 'Your'=0.57 'journey'=0.21 'starts'=0.07 'with'=0.14 'one'=0.01 'step'=0.00
step  50  loss=0.0465  |  journey关注: 'Your'=0.84 'journey'=0.09 'starts'=0.03 'with'=0.04 'one'=0.00 'step'=0.00
step 100  loss=0.0005  |  journey关注: 'Your'=0.99 'journey'=0.01 'starts'=0.00 'with'=0.00 'one'=0.00 'step'=0.00
step 200  loss=0.0000  |  journey关注: 'Your'=0.99 'journey'=0.00 'starts'=0.00 'with'=0.00 'one'=0.00 'step'=0.00
"""
# run first in the kernel: every connection that leaves this machine is refused and recorded
# (the kernel's own channels are ZeroMQ's, in C, never Python's socket module)
NO_NETWORK = r'''
import socket as _socket
_attempts = []
_connect = _socket.socket.connect
def _guarded(self, address, _connect=_connect):
    host = address[0] if isinstance(address, tuple) else address
    if isinstance(host, str) and host not in ("127.0.0.1", "::1", "localhost") and self.family != _socket.AF_UNIX:
        _attempts.append(repr(address))
        raise OSError("network access refused by the test")
    return _connect(self, address)
_socket.socket.connect = _guarded
_socket.socket.connect_ex = lambda self, address: _guarded(self, address) or 0
_getaddrinfo = _socket.getaddrinfo
def _no_lookup(host, *args, **kwargs):
    if host not in (None, "127.0.0.1", "::1", "localhost"):
        _attempts.append(f"lookup {host}")
        raise _socket.gaierror("network access refused by the test")
    return _getaddrinfo(host, *args, **kwargs)
_socket.getaddrinfo = _no_lookup
'''


def cells_of(nb) -> list[tuple[str, str]]:
    return [(c.cell_type, c.source.strip()) for c in nb.cells]


def test_the_ipynb_is_built_from_its_percent_source():
    import jupytext
    import nbformat

    built = nbformat.read(BUILT, as_version=4)
    assert cells_of(built) == cells_of(jupytext.read(SOURCE)), "run `make notebook` after editing the .py"
    assert all(not c.get("outputs") for c in built.cells if c.cell_type == "code")  # outputs are the kernel's
    first = built.cells[0].source
    assert "%pip install" in first and "第一次" in first  # how to install, and that the first run takes seconds


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """The notebook executed as a learner runs it (its folder the working folder), saved as run."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(BUILT, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(NO_NETWORK))
    nb.cells.append(nbformat.v4.new_code_cell("print('network attempts:', _attempts)"))
    saved = {k: os.environ.get(k) for k in ("MPLBACKEND", "LANGUAGE")}
    os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"  # a notebook's own backend
    os.environ.pop("LANGUAGE", None)  # the notebook chooses its language itself (lang="zh")
    work = tmp_path_factory.mktemp("notebook")
    before = set(os.listdir(SOURCE.parent))
    try:
        NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(work)}}).execute()
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    assert os.listdir(work) == [] and set(os.listdir(SOURCE.parent)) == before  # nothing written
    path = work.parent / "attnlab_tutorial.executed.ipynb"
    nbformat.write(nb, path)
    return nbformat.read(path, as_version=4)  # the outputs as saved


def cell(nb, starts: str):
    (found,) = [c for c in nb.cells if c.cell_type == "code" and c.source.startswith(starts)]
    return found


def stdout(c) -> str:
    return "".join(o.text for o in c.outputs if o.output_type == "stream" and o.name == "stdout")


def data(c, mime: str) -> list:
    return [o.data[mime] for o in c.outputs if o.output_type in ("execute_result", "display_data") and mime in o.data]


@pytest.mark.notebook
def test_the_companion_notebook_runs_offline_and_shows_every_result(executed):
    errors = [o for c in executed.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert errors == []
    assert stdout(executed.cells[-1]) == "network attempts: []\n"
    stderr = [o.text for c in executed.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "stream" and o.name == "stderr"]
    assert stderr == []  # no warning (a missing glyph, a progress bar where none is due) anywhere
    # §1–4 in Chinese, with the tutorial's numbers
    walk = stdout(cell(executed, "arrays = attnlab.walkthrough"))
    assert "== 1. 分词（Tokenization）==" in walk and "token_ids: [7120, 7002, 4940, 351, 530, 2239]" in walk
    # the check: all six stages pass, then the missing √d_k is named at stage 4
    assert stdout(cell(executed, "import torch")).splitlines()[-1] == "全部 6 个阶段都与教程的数字一致"
    wrong = stdout(cell(executed, "def attention_scores"))
    assert "阶段 4/6" in wrong and "没有用 √d_k 缩放：要把 Q @ K.T 除以 d_k ** 0.5" in wrong
    # §5: the five lines, the figure, the report in a sandboxed frame, a few lines of text
    run = cell(executed, "run = attnlab.train()")
    assert stdout(run).startswith(TUTORIAL_LINES) and stdout(run).count("\n") == 6
    (png,) = data(run, "image/png")
    assert png.startswith("iVBORw0KGgo")  # base64 of a PNG's signature
    (page,) = data(run, "text/html")
    assert len(re.findall(r'<iframe srcdoc="[^"]*" sandbox="allow-scripts"', page)) == 1
    (text,) = data(run, "text/plain")
    assert text.splitlines()[1] == "  ' journey' 最关注 'Your'（0.99），第 200 步" and len(text.splitlines()) == 3
    assert data(cell(executed, "import matplotlib.pyplot"), "image/png")  # the learner's own figure, in Chinese
    # §8: each exercise a table and its answer
    for n, jobs in [(1, 2), (2, 3), (3, 2), (4, 6), (5, 2)]:
        (table,) = data(cell(executed, f"attnlab.exercise({n})"), "text/html")
        assert table.count("<tr>") == jobs + 1, n
        assert f"练习 {n} 答" in table, n


HOST = """<!doctype html><html><head><meta charset="utf-8"><style>
body {{ font-family: Georgia, serif; color: rgb(20, 20, 20); background: rgb(250, 250, 245); }}
h1 {{ color: rgb(200, 0, 0); font-size: 40px; }}
.cell-output {{ width: 1100px; }}
</style></head><body><h1 id="nb-title">notebook</h1><p id="nb-text">a markdown cell</p>
<div class="cell-output">{output}</div></body></html>"""


@pytest.mark.notebook
def test_the_saved_frame_shows_the_heatmap_moves_with_the_slider_and_leaves_the_notebook_alone(
        executed, tmp_path, browser, shots):
    (output,) = data(cell(executed, "run = attnlab.train()"), "text/html")
    alone = tmp_path / "alone.html"
    alone.write_text(HOST.format(output=""), encoding="utf-8")
    host = tmp_path / "notebook.html"
    host.write_text(HOST.format(output=output), encoding="utf-8")
    styles = """() => ['nb-title', 'nb-text'].map(id => { const s = getComputedStyle(document.getElementById(id));
        return [s.color, s.fontFamily, s.fontSize, getComputedStyle(document.body).backgroundColor]; })"""
    ctx = browser.new_context(viewport={"width": 1300, "height": 1400})
    page = ctx.new_page()
    page.goto(alone.as_uri())
    before = page.evaluate(styles)
    attempted: list[str] = []
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(("file:", "about:", "data:"))
               else (attempted.append(route.request.url), route.abort()))
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(host.as_uri())
    assert page.evaluate(styles) == before  # the report's styles never reach the notebook's page
    frame = page.frame_locator("iframe")
    report = next(f for f in page.frames if f != page.main_frame)
    report.wait_for_function("() => window.attnlabReport && window.attnlabReport.view")
    assert page.evaluate("() => { try { return !!document.querySelector('iframe').contentDocument; } "
                         "catch (e) { return 'blocked'; } }") is False  # another origin: the notebook cannot reach in
    assert report.evaluate("() => { try { return window.parent.document.title; } catch (e) { return 'blocked'; } }") \
        == "blocked"  # nor the report out
    slider = frame.locator("#step-slider")
    slider.focus()
    page.keyboard.press("Home")
    assert frame.locator("#step-label").text_content() == "step 0"
    heatmap = frame.locator(".hm canvas").first
    assert heatmap.bounding_box()["width"] > 100
    drawn_at_0 = heatmap.screenshot()
    page.keyboard.press("End")
    assert frame.locator("#step-label").text_content() == "step 200"
    assert "'Your'=0.99" in frame.locator("#tutorial-line").text_content()
    assert heatmap.screenshot() != drawn_at_0  # the heatmap moved with the slider
    assert page.evaluate(styles) == before
    path = shots / "notebook-frame.png"
    page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")
    assert errors == [] and attempted == []
    ctx.close()
