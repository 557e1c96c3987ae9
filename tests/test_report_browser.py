"""The report in a real browser: Debian's headless Chromium (/usr/bin/chromium) driven by
Playwright, with every non-file request aborted (and recorded: none may be attempted).

Checks what a learner does: scrub to each of the tutorial's snapshot steps and read the line
the tutorial prints, ' journey' -> 'Your' = 0.99 at step 200; hover a token and see its row
highlighted; lock and unlock a row; play; sort a sweep's table, move the shared slider, open a
run; Chinese, emoji and hostile token text shown as text; each head and their mean.

Screenshots are saved (and their paths printed) under pytest's temporary folder, or under
``$ATTNLAB_SCREENSHOTS`` when set. Without Chromium or Playwright these tests skip, except when
``CI=true``, where they fail.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from report_helpers import page_data, write_synthetic_run

from attnlab.saved import report, safe_read

from conftest import GOLDEN_SECTION5

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--disable-extensions", "--mute-audio"]
EVIL = "</script><script>alert(1)</script>"
IMG = "<img src=x onerror=alert(2)>"
TUTORIAL_TOKENS = ["Your", "journey", "starts", "with", "one", "step"]


def _missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[test]' -c constraints.txt)"
    if not os.access(CHROMIUM, os.X_OK):
        return f"{CHROMIUM} is missing (apt-get install chromium)"
    return None


@pytest.fixture(scope="module")
def browser():
    why = _missing()
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"browser tests need Chromium and Playwright in CI: {why}")
        pytest.skip(why)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    out = os.environ.get("ATTNLAB_SCREENSHOTS")
    path = Path(out) if out else tmp_path_factory.mktemp("report-screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


class Page:
    """A page opened offline: requests other than file: are aborted and recorded; console
    errors, page errors and dialogs are recorded."""

    def __init__(self, browser, path: Path, width: int = 1300, height: int = 900):
        self.attempted: list[str] = []
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.ctx = browser.new_context(viewport={"width": width, "height": height})
        self.page = self.ctx.new_page()
        self.page.route("**/*", self._route)
        self.page.on("console", lambda m: self.errors.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        self.page.on("dialog", self._dialog)
        self.page.goto(Path(path).resolve().as_uri())
        self.page.wait_for_function("() => window.attnlabReport && window.attnlabReport.view")  # a function: no eval (CSP)

    def _route(self, route):
        if route.request.url.startswith("file:"):
            route.continue_()
        else:
            self.attempted.append(route.request.url)
            route.abort()

    def _dialog(self, dialog):
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def text(self, selector: str) -> str:
        return self.page.text_content(selector)

    def shot(self, shots: Path, name: str) -> Path:
        path = shots / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        print(f"screenshot: {path}")
        return path

    def close_clean(self) -> None:
        """Assert nothing went wrong, then close."""
        try:
            assert self.errors == [], self.errors
            assert self.attempted == [], f"network requests attempted: {self.attempted}"
            assert self.dialogs == [], f"dialogs opened: {self.dialogs}"
        finally:
            self.ctx.close()


def tutorial_line(step: int, loss: float, row: list[float]) -> str:
    """The line tutorial §5 prints at a snapshot step."""
    return (f"step {step:3d}  loss={loss:.4f}  |  ' journey' attends: "
            + " ".join(f"{t!r}={v:.2f}" for t, v in zip(TUTORIAL_TOKENS, row)))


def overlay_alpha(p: Page, row: int, col: int) -> int:
    """Alpha of the highlight overlay at the centre of cell (row, col) of the (first) heatmap."""
    return p.page.evaluate("""([row, col]) => {
        const c = document.querySelector('.hm .overlay'), T = document.querySelectorAll('.hm .rl').length;
        const x = Math.floor((col + 0.5) * c.width / T), y = Math.floor((row + 0.5) * c.height / T);
        return c.getContext('2d').getImageData(x, y, 1, 1).data[3];
    }""", [row, col])


# ------------------------------------------------------------------ one run
def test_default_report_scrub_hover_lock_play(browser, default_run, shots):
    p = Page(browser, report.write_run_report(default_run))
    page = p.page
    assert p.text("h1") == "default" and p.text(".badge") == "completed"
    assert page.locator("#head-select option").count() == 2  # head 1 and the mean of 1 head
    # the slider, from step 0 through every snapshot: the tutorial's five printed lines
    slider = page.locator("#step-slider")
    slider.focus()
    page.keyboard.press("Home")
    for k, (step, (loss, row)) in enumerate(GOLDEN_SECTION5.items()):
        if k:
            page.keyboard.press("ArrowRight")
        assert p.text("#step-label") == f"step {step}"
        assert p.text("#step-count") == f"snapshot {k + 1} of 5"
        assert p.text("#tutorial-line") == tutorial_line(step, loss, row)
    assert slider.input_value() == "4"
    # step 200: ' journey' -> 'Your' = 0.99, also in the list of where ' journey' attends
    first = page.locator("#attends-list li").first
    assert first.locator(".tok").text_content() == "'Your'"
    assert round(float(first.locator(".val").text_content()), 2) == 0.99
    assert "'Your'=0.99" in p.text("#tutorial-line")
    assert p.text("#attends-title") == "' journey' (position 1) attends to"
    hm = page.locator(".hm").first
    assert hm.get_attribute("data-highlight-row") == "1" and hm.get_attribute("data-locked") == "true"
    p.shot(shots, "default-step200")

    # hover a query token: its row is highlighted (the others dimmed), the list follows it
    page.hover(".hm .rl[data-row='2']")
    assert hm.get_attribute("data-highlight-row") == "2" and hm.get_attribute("data-locked") == "false"
    assert "hl" in page.locator(".hm .rl[data-row='2']").get_attribute("class")
    assert p.text("#attends-title") == "' starts' (position 2) attends to"
    assert overlay_alpha(p, 2, 3) == 0 and overlay_alpha(p, 0, 3) > 0 and overlay_alpha(p, 5, 3) > 0
    # hover a cell: a tooltip names query, key and weight
    box = page.locator(".hm canvas").first.bounding_box()
    page.mouse.move(box["x"] + box["width"] * 3.5 / 6, box["y"] + box["height"] * 2.5 / 6)
    tip = p.text("#tooltip")
    assert tip.startswith("' starts' → ' with'\nweight 0.") and "(query 2, key 3)" in tip
    assert page.locator("#tooltip").is_visible()
    p.shot(shots, "default-hover-starts")
    # leave: back to the locked focus token; click locks another row; Esc unlocks
    page.mouse.move(2, 2)
    assert hm.get_attribute("data-highlight-row") == "1" and hm.get_attribute("data-locked") == "true"
    page.click(".hm .rl[data-row='3']")
    page.mouse.move(2, 2)
    assert hm.get_attribute("data-highlight-row") == "3" and "locked" in p.text("#attends .chip")
    page.keyboard.press("Escape")
    assert hm.get_attribute("data-highlight-row") == ""
    # the arrow keys anywhere on the page, and play from the start to the end
    page.locator("h1").click()
    page.keyboard.press("Home")
    assert p.text("#step-label") == "step 0"
    page.keyboard.press("ArrowRight")
    assert p.text("#step-label") == "step 20"
    page.keyboard.press("Home")
    page.click("#play")
    assert p.text("#play") == "❚❚ Pause"
    page.wait_for_function("() => document.getElementById('step-label').textContent === 'step 200' && "
                           "document.getElementById('play').textContent === '▶ Play'", timeout=20_000)
    p.close_clean()


def test_tokens_in_chinese_emoji_and_markup_are_text(browser, tmp_path, shots):
    tokens = ["你好", "注意力", " 🚀", EVIL, IMG, " step"]
    page_path = report.write_run_report(write_synthetic_run(tmp_path / "zh", tokens, steps=[0, 30, 150]))
    p = Page(browser, page_path)
    labels = p.page.locator(".hm .rl").all_text_contents()
    assert labels == ["你好", "注意力", "🚀", EVIL, IMG, "step"]
    # column labels are clipped at 14 characters; the whole token is in their tooltip
    assert p.page.locator(".hm .cl").all_text_contents() == ["你好", "注意力", "🚀", "</script><scr…", "<img src=x on…", "step"]
    assert p.page.locator(".hm .cl").nth(3).get_attribute("title") == f"{EVIL!r}  (position 3)"
    assert p.page.evaluate("document.querySelectorAll('img').length") == 0
    assert p.page.evaluate("document.scripts.length") == 2
    p.page.hover(".hm .rl[data-row='1']")
    assert p.text("#attends-title") == "'注意力' (position 1) attends to"
    assert set(p.page.locator("#attends-list .tok").all_text_contents()) == {
        "'你好'", "'注意力'", "' 🚀'", "'</script><script>alert(1)</script>'", "'<img src=x onerror=alert(2)>'", "' step'"}
    p.shot(shots, "cjk-emoji-markup")
    p.close_clean()
    # compared with a run whose snapshots are elsewhere: the shared slider shows each run's nearest
    other = write_synthetic_run(tmp_path / "other", tokens, steps=[0, 20, 50, 100, 150], seed=1)
    p = Page(browser, report.write_report([tmp_path / "zh", other], tmp_path / "cmp.html"))
    assert p.page.evaluate("+document.getElementById('step-slider').max") == len({0, 20, 30, 50, 100, 150}) - 1
    p.page.locator("h1").click()
    p.page.keyboard.press("Home")
    p.page.keyboard.press("ArrowRight")
    assert p.text("#step-label") == "step 20"
    foots = p.page.locator(".mcard .mfoot").all_text_contents()
    assert foots[0].startswith("step 30 (nearest to 20)  ·  '注意力' → ") and foots[1].startswith("step 20  ·  ")
    small = ["你好", "注意力", "🚀", "</scrip…", "<img sr…", "step"]  # clipped at 8 characters in small multiples
    assert p.page.locator(".mcard .hm .rl").all_text_contents() == small * 2
    p.shot(shots, "cjk-compare-nearest")
    p.close_clean()


# ------------------------------------------------------------------ comparisons
def test_sweep_report_table_slider_and_detail(browser, report_sweep, shots):
    p = Page(browser, report.write_sweep_report(report_sweep))
    page = p.page
    jobs = lambda: page.locator("#runs-table tbody td.job .txt").all_text_contents()  # noqa: E731
    a, b = "0_optimizer.lr=0.01", "1_optimizer.lr=0.05"  # attnlab-compare's job cells
    assert jobs() == [a, b]
    page.click("#runs-table th[data-col='final_loss']")
    assert jobs() == [b, a]  # 4.94e-06 < 0.0483
    assert page.locator("#runs-table th[data-col='final_loss']").get_attribute("aria-sort") == "ascending"
    page.click("#runs-table th[data-col='final_loss']")
    assert jobs() == [a, b]
    page.click("#runs-table th[data-col='steps_to_threshold']")
    assert jobs() == [b, a]  # the run that never reached it: last
    page.click("#runs-table th[data-col='steps_to_threshold']")
    assert jobs() == [b, a]  # ... in either direction
    # the table is attnlab-compare's printed one: its headers and, row by row, its cells (observation
    # columns included; here "focus>0.9 at")
    from attnlab.saved import table
    from attnlab.saved.runs import collect_rows

    rows = collect_rows([report_sweep])
    cols = table.columns_of(rows, table=True)
    heads = [t.rstrip(" ▲▼") for t in page.locator("#runs-table thead th").all_text_contents()]
    assert heads == [table.header(c) for c in cols] and heads[-2:] == ["seconds", "first >0.9 at step"]  # no error: no column
    page.click("#runs-table th[data-col='focus_step']")
    want = table.sort_rows(rows, "focus_step")
    assert want[0]["focus_step"] == 100
    for tr, row in zip(page.locator("#runs-table tbody tr").all(), want):
        cells = tr.locator("td").all_text_contents()
        assert cells == [table.cell_text(c, row.get(c)) for c in cols]
    first = want[0]["job"]  # its legend name and folder on hover
    assert page.locator("#runs-table tbody td.job .txt").first.get_attribute("title") == \
        f"{first[0]}: lr={first.rsplit('=', 1)[1]}  ·  {first}"
    # small multiples on the shared slider: at step 0 both runs are the tutorial's untrained start
    assert page.locator(".mcard").count() == 2 and p.text("#step-label") == "step 200"
    page.locator("h1").click()
    page.keyboard.press("Home")
    assert p.text("#step-label") == "step 0"
    for foot in page.locator(".mcard .mfoot").all_text_contents():
        assert foot == "step 0  ·  ' journey' → 'Your' 0.22  ·  loss 2.3566"
    page.keyboard.press("End")
    foots = page.locator(".mcard .mfoot").all_text_contents()
    assert foots[0].startswith("step 200  ·  ' journey' → 'Your' 0.98") and foots[1].startswith("step 200  ·  ' journey' → 'Your' 0.99")
    # only the key that differs
    assert page.locator("#config-diff tbody td:first-child").all_text_contents() == ["optimizer.lr"]
    assert page.locator("#config-diff tbody td").all_text_contents() == ["optimizer.lr", "0.01", "0.05"]
    assert page.locator("#loss-legend .item").count() == 2
    p.shot(shots, "sweep")
    # click a run: its detail view; back to the comparison
    page.locator(".mcard").nth(1).click()
    assert page.evaluate("location.hash") == "#run=1"
    assert p.text("#detail-view h1") == "1: lr=0.05" and p.text("#step-label") == "step 0"
    p.shot(shots, "sweep-detail-run1")
    page.click("a.back")
    page.wait_for_selector("#compare-view")
    assert page.locator("#detail-view").count() == 0
    page.locator("#runs-table tbody tr[data-run='0']").click()  # the table kept its sort order
    assert page.evaluate("location.hash") == "#run=0" and p.text("#detail-view h1") == "0: lr=0.01"
    page.go_back()
    page.wait_for_selector("#compare-view")
    assert page.evaluate("location.hash") == ""
    p.close_clean()


def test_head_selector_each_head_and_the_mean(browser, tmp_path, shots):
    tokens = ["Your", " journey", " starts", " with"]
    run_dir = write_synthetic_run(tmp_path / "heads", tokens, steps=[0, 4], heads=2, seed=3)
    page_path = report.write_run_report(run_dir)
    (run,) = page_data(page_path)["runs"]
    att = safe_read.read_attention(run_dir)
    assert run["heads"] == 2 and np.abs(np.asarray(run["weights"]) - att["weights"]).max() <= 5.0001e-5
    w = np.asarray(run["weights"], dtype=np.float64)  # what the page holds: (S, H, T, T)

    def line(m) -> str:  # the ' journey' row at step 0, as the tutorial line prints it
        return " ".join(f"{t.strip()!r}={v:.2f}" for t, v in zip(tokens, m[1]))

    p = Page(browser, page_path)
    page = p.page
    assert page.locator("#head-select option").all_text_contents() == ["mean of 2 heads", "head 0", "head 1"]
    assert page.locator("#head-select").input_value() == "-1"  # the mean first
    assert p.text("#tutorial-line").endswith(line(w[0].mean(axis=0)))
    for h in (0, 1):
        page.select_option("#head-select", str(h))
        assert p.text("#tutorial-line").endswith(line(w[0, h]))
    assert line(w[0, 0]) != line(w[0, 1])
    p.shot(shots, "two-heads-head2")
    p.close_clean()
