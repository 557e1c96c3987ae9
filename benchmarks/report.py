"""Budgets of the offline HTML report (issue 13), measured by one command:

    python -m benchmarks.report                # ~1 min on 2 cores; prints a markdown table
    python -m benchmarks.report --work DIR     # keep the run dirs and pages in DIR

What it measures (targets from issue 13):

- ``write``: seconds to write the default run's ``report.html`` with :func:`attnlab.saved.report.write_run_report`
  in a process that has attnlab imported (what a training job pays at its end), median of
  ``--reps`` writes; and the wall time of a fresh ``attnlab-report RUN_DIR`` process (Python
  start and imports included). Target <= 0.3 s.
- ``size``: bytes of the default run's page. Target <= 1 MB.
- ``large``: bytes of the page of a real training run with a snapshot at each of 1,000 steps
  at T = 256 (``attention.npz`` 262 MB), and how many snapshots it shows. Target <= 20 MB.
- ``redraw``: in headless Chromium (``/usr/bin/chromium``, driven by Playwright), milliseconds
  one slider step takes to redraw the page, timed inside the page with ``performance.now()``
  around the redraw (heatmap, row highlight, attends list, tutorial line, chart markers;
  ``window.attnlabReport.redrawMs``), for ``--steps`` arrow-key steps: median and 95th
  percentile, on the large run's page and the default one. Target < 50 ms.

The default run is ``attnlab hydra.run.dir=...`` (the tutorial's section-5 training). The
large run is made by :func:`make_large_run` (tests/test_report.py uses it too).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-extensions", "--mute-audio"]
WRITE_MAX_S, SIZE_MAX, LARGE_MAX, REDRAW_MAX_MS = 0.3, 1_000_000, 20_000_000, 50.0


def make_default_run(run_dir: Path) -> Path:
    """The tutorial's default run (``attnlab hydra.run.dir=RUN_DIR``, default logging) in a subprocess."""
    env = {**os.environ, "MPLBACKEND": "Agg"}
    proc = subprocess.run([sys.executable, "-m", "attnlab.commands.cli", f"hydra.run.dir={run_dir}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"default run failed:\n{proc.stderr}")
    return Path(run_dir)


def make_large_run(run_dir: Path, snapshots: int = 1000, T: int = 256) -> Path:
    """A real training run of ``snapshots`` steps with a snapshot at every step on a text of
    exactly ``T`` GPT-2 tokens (d_model 6 as the tutorial, ``logging=off``), written by
    :func:`attnlab.commands.job.run_job` into ``run_dir``, plus ``.hydra/config.yaml`` as Hydra would
    save it. ``attention.npz`` holds (snapshots, 1, T, T) float32: 262 MB for 1,000 x 256."""
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    from attnlab.commands.hydra_config import register_configs
    from attnlab.commands.job import run_job
    from benchmarks.run import text_with_tokens

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    text = run_dir.parent / f"text_{T}.txt"
    text.write_text(text_with_tokens(T), encoding="utf-8")
    register_configs()
    with initialize_config_module("attnlab.conf", version_base="1.3"):
        cfg = compose("config", overrides=[f"text_file={text}", f"train.steps={snapshots}", "train.snapshot_steps=[0]",
                                           "logging=off", "logging.console=false", "logging.progress=false"])
    cfg.train.snapshot_steps = list(range(snapshots))  # faster set here than parsed as an override
    (run_dir / ".hydra").mkdir(exist_ok=True)
    OmegaConf.save(cfg, run_dir / ".hydra" / "config.yaml")
    status = run_job(cfg, run_dir).status
    if status != "completed":
        raise RuntimeError(f"large run ended {status}")
    return run_dir


def launch_chromium(playwright):
    """Debian's Chromium, headless, no network services of its own (Playwright's bundled
    browsers are never downloaded)."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


def block_network(page, attempted: list[str]) -> None:
    """Abort every request that is not for a ``file:`` URL, recording it in ``attempted``."""
    def handle(route):
        url = route.request.url
        if url.startswith("file:"):
            route.continue_()
        else:
            attempted.append(url)
            route.abort()

    page.route("**/*", handle)


def redraw_ms(page_path: Path, steps: int) -> dict:
    """Open ``page_path`` in headless Chromium, press ArrowRight/ArrowLeft ``steps`` times on
    the step slider's page and return the in-page redraw times (ms): median, p95, n."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = launch_chromium(p)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 900})
            attempted: list[str] = []
            block_network(page, attempted)
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            t0 = time.perf_counter()
            page.goto(page_path.resolve().as_uri())
            page.wait_for_function("() => window.attnlabReport && window.attnlabReport.redrawMs.length > 0")
            load_s = time.perf_counter() - t0
            page.evaluate("window.attnlabReport.redrawMs.length = 0")
            page.locator("body").click(position={"x": 5, "y": 5})
            page.keyboard.press("Home")
            page.evaluate("window.attnlabReport.redrawMs.length = 0")
            n = page.evaluate("document.getElementById('step-slider').max | 0") + 1
            key = "ArrowRight"
            for i in range(steps):
                if i and i % (n - 1 or 1) == 0:
                    key = "ArrowLeft" if key == "ArrowRight" else "ArrowRight"
                page.keyboard.press(key)
            times = page.evaluate("window.attnlabReport.redrawMs.slice()")
            if errors or attempted:
                raise RuntimeError(f"page errors {errors}, network attempted {attempted}")
        finally:
            browser.close()
    times = sorted(times)
    return {"median": statistics.median(times), "p95": times[min(len(times) - 1, int(0.95 * len(times)))],
            "n": len(times), "load_s": load_s}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, help="folder for the run dirs and pages (default: a temporary one)")
    ap.add_argument("--reps", type=int, default=7, help="writes of the default report to take the median of")
    ap.add_argument("--steps", type=int, default=200, help="slider steps to time in Chromium")
    args = ap.parse_args(argv)
    tmp = None
    if args.work is None:
        tmp = tempfile.TemporaryDirectory(prefix="attnlab-bench-report-")
        work = Path(tmp.name)
    else:
        work = args.work
        work.mkdir(parents=True, exist_ok=True)
    try:
        from attnlab.saved import report

        default = work / "default"
        if not (default / "summary.json").exists():
            make_default_run(default)
        large = work / "large" / "run"
        if not (large / "summary.json").exists():
            t0 = time.perf_counter()
            make_large_run(large)
            print(f"large run made in {time.perf_counter() - t0:.1f} s", file=sys.stderr)

        report.write_run_report(default)  # warm: modules imported, files in the page cache
        writes = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            page = report.write_run_report(default)
            writes.append(time.perf_counter() - t0)
        size = page.stat().st_size
        cli = str(Path(sys.executable).with_name("attnlab-report"))
        cold = []
        for _ in range(3):
            t0 = time.perf_counter()
            subprocess.run([cli, str(default), "-o", str(work / "default-cli.html")], check=True, capture_output=True)
            cold.append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        large_page = report.write_run_report(large)
        large_s = time.perf_counter() - t0
        large_size = large_page.stat().st_size
        rec = report.load_run(large)
        shown, total = len(rec["steps"]), rec["snapshots_total"]

        chromium = Path(CHROMIUM).exists()
        r_large = redraw_ms(large_page, args.steps) if chromium else None
        r_default = redraw_ms(page, min(args.steps, 100)) if chromium else None

        def ok(good: bool) -> str:
            return "yes" if good else "**NO**"

        rows = [
            ("write default report (in process, median)", f"{statistics.median(writes):.3f} s", f"<= {WRITE_MAX_S} s",
             ok(statistics.median(writes) <= WRITE_MAX_S)),
            ("`attnlab-report RUN_DIR` (fresh process, median of 3)", f"{statistics.median(cold):.2f} s", "(imports incl.)", "-"),  # noqa: E501 (a table row)
            ("default page size", f"{size:,} B ({size / 1e6:.3f} MB)", "<= 1 MB", ok(size <= SIZE_MAX)),
            (f"large page size (1,000 snapshots, T = 256; shows {shown} of {total})",
             f"{large_size:,} B ({large_size / 1e6:.2f} MB)", "<= 20 MB", ok(large_size <= LARGE_MAX)),
            ("write large report", f"{large_s:.2f} s", "-", "-"),
        ]
        if r_large:
            rows += [
                (f"slider step redraw, large page (median / p95 of {r_large['n']})",
                 f"{r_large['median']:.2f} / {r_large['p95']:.2f} ms", f"< {REDRAW_MAX_MS:.0f} ms", ok(r_large["p95"] < REDRAW_MAX_MS)),  # noqa: E501 (a table row)
                ("large page load to first draw (Chromium)", f"{r_large['load_s']:.2f} s", "-", "-"),
                (f"slider step redraw, default page (median / p95 of {r_default['n']})",
                 f"{r_default['median']:.2f} / {r_default['p95']:.2f} ms", f"< {REDRAW_MAX_MS:.0f} ms", ok(r_default["p95"] < REDRAW_MAX_MS)),  # noqa: E501 (a table row)
            ]
        else:
            rows.append(("slider step redraw", f"skipped: no {CHROMIUM}", f"< {REDRAW_MAX_MS:.0f} ms", "-"))
        print("| measure | value | target | met |")
        print("| --- | --- | --- | --- |")
        for r in rows:
            print("| " + " | ".join(r) + " |")
    finally:
        if tmp is not None:
            tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
