"""attnlab side by side with plain PyTorch: one command, every case, results written down.

    python -m benchmarks.run                 # full run (~25 min on 2 cores) -> docs/benchmarks.md
    python -m benchmarks.run --quick         # smoke run (~2 min) -> outputs/benchmarks-quick.md
    make bench ARGS="--only single,loaded --reps 7"

Cases (each repetition of a case runs its variants one after another, the order rotated every
repetition, so a noisy neighbour hits every variant alike; tables quote medians and ratios):

- ``single``: the ``attnlab`` command (default logging; each logging option off; ``logging=off``)
  against ``benchmarks/plain_tutorial.py`` (tutorial §5, no Hydra, no logging, torch's default
  threads) and the same script drawing the section's figure (``--figure``: the tutorial's pyplot
  code, ``savefig`` for ``plt.show()``, headless): the fair baseline of a default run, which
  draws that figure too. Wall time, peak RSS and CPU of each process (``os.wait4`` rusage), with
  those of the processes it started (attnlab's render child, reaped here: :func:`adopt_orphans`).
- ``loaded``: a 2,000-step ``logging=off`` run against the plain script for 2,000 steps while
  two busy processes (started and ended here, :mod:`benchmarks.load`) keep both cores of a
  2-core machine busy.
- ``sweep``: ``attnlab -m`` over 20 seeds with a few steps each (``logging=off`` and default
  logging), against the same 20 trainings in one plain process: overhead per job in ms.
- ``scaling``: (T, d_model) in (6, 6), (64, 64), (256, 256), (1024, 768), d_k = d_v = d_model,
  text = a generated file of exactly T GPT-2 tokens, 5 snapshots per run; attnlab's job function
  (``job.run_job`` with run-dir artifacts, via ``benchmarks/child.py``) against the plain loop:
  steps per second of the training loop, peak RSS.
- ``snapshots``: a snapshot at every step at T = 256 for 100 and 1,000 steps: peak RSS (flat or
  growing?), run-dir size.
- ``threads``: training steps/s with 1 vs 2 torch threads over a grid of (T, d_model) up to
  (1024, 768), idle and with two busy processes (``benchmarks/threads_grid.py``): the
  measurement behind ``threads=auto`` (:mod:`attnlab.core.threads`).

Results go between the ``<!-- bench:begin -->`` / ``<!-- bench:end -->`` markers of ``--out``
(text outside them, e.g. analysis notes, is kept), plus the raw samples as JSON (``--json``).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

from benchmarks.load import busy_processes

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
ATTNLAB = str(Path(PY).with_name("attnlab"))
PLAIN = str(ROOT / "benchmarks" / "plain_tutorial.py")
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
MB = 1024 * 1024
CASES = ("single", "loaded", "sweep", "scaling", "variants", "snapshots", "threads")

# targets of issue 14 (speed, as ratios measured in one run) ...
DEFAULT_VS_PLAIN_FIGURE_MAX = 0.75  # default run / plain script with its figure
OFF_VS_PLAIN_MAX = 0.95  # logging=off / plain script
LOADED_VS_PLAIN_MAX = 0.5  # 2,000 steps, logging=off, 2 busy processes / plain script
SWEEP_OFF_MAX_MS, SWEEP_DEFAULT_MAX_MS = 150.0, 600.0  # overhead per job over the plain loop
SCALING_MIN = 0.95  # attnlab steps/s / plain steps/s at every size
# ... and of issue 6 (memory)
SINGLE_EXTRA_MB = 80.0
SNAPSHOT_GROWTH_MAX_MB = 10.0  # "flat": what 1,000 snapshots at T=256 would hold is ~236 MB more

LOADED_STEPS = 2000
BUSY_PROCESSES = 2
SINGLE_VARIANTS = {  # label -> overrides
    "default logging": [],
    "logging.tensorboard=false": ["logging.tensorboard=false"],
    "logging.images=false": ["logging.images=false"],
    "logging.figures=false": ["logging.figures=false"],
    "logging=off": ["logging=off"],
}
PLAIN_LABEL, PLAIN_FIGURE_LABEL = "plain script", "plain script with its figure"
SCALING_SIZES = [(6, 6, 2000), (64, 64, 1000), (256, 256, 300), (1024, 768, 20)]  # T, d_model, steps
THREAD_GRID = [(t, d) for t in (6, 64, 256, 1024) for d in (6, 64, 256, 768)]


@dataclass
class Sample:
    """One child process: wall seconds, peak RSS (MB), exit status, and what it reported."""

    wall_s: float
    rss_mb: float
    rc: int
    report: dict = field(default_factory=dict)
    cpu_s: float = 0.0  # user + system CPU seconds of the child and every process it started


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def child_env(threads: int | None) -> dict:
    """The environment of every measured child: this checkout importable, headless matplotlib,
    and ``OMP_NUM_THREADS`` only when ``--threads`` asks for it (torch's default otherwise)."""
    env = {key: value for key, value in os.environ.items() if key not in ("HYDRA_FULL_ERROR", "OMP_NUM_THREADS")}
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["MPLBACKEND"] = "Agg"  # the plain script's plt.savefig, headless
    if threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    return env


def adopt_orphans() -> bool:
    """Make this process the Linux "child subreaper" of what it starts: a process a measured
    child leaves behind (attnlab's render child, :mod:`attnlab.outputs.render_process`) is re-parented
    here when the child ends, so :func:`measure` can reap it and count its CPU and memory.
    False where that is not possible (not Linux)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def _reap_group(pgid: int, deadline: float) -> list:
    """Reap every process of process group ``pgid`` re-parented here (see :func:`adopt_orphans`);
    their rusages. Kills the group at ``deadline``."""
    usages = []
    while True:
        try:
            pid, _, usage = os.wait4(-pgid, os.WNOHANG)
        except ChildProcessError:
            return usages
        if pid:
            usages.append(usage)
        elif time.perf_counter() > deadline:
            try:
                os.killpg(pgid, 9)
            except ProcessLookupError:
                pass
        else:
            time.sleep(0.002)


def measure(argv: list[str], env: dict, logfile: Path, report: Path | None = None, timeout: float = 900) -> Sample:
    """Run ``argv`` to the end; wall time from fork to reap, peak RSS and CPU from ``os.wait4``.

    Processes the child started and left (attnlab's render child) are reaped too (the child
    runs in its own process group; see :func:`adopt_orphans`): their CPU seconds are added to
    the child's, and their peak RSS to its peak (the sum of the processes' peaks: an upper
    bound of what they held together)."""
    with open(logfile, "ab") as out:
        out.write(("$ " + " ".join(argv) + "\n").encode())
        out.flush()
        started = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=out, stdin=subprocess.DEVNULL, env=env, cwd=ROOT,
                                start_new_session=True)
        deadline = started + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.002)
        wall = time.perf_counter() - started
        left = _reap_group(proc.pid, time.perf_counter() + 60)
    proc.returncode = returncode = os.waitstatus_to_exitcode(status)
    data = {}
    if report is not None and report.is_file():
        data = json.loads(report.read_text(encoding="utf-8"))
        report.unlink()
    if returncode != 0:
        log(f"  ! exit {returncode}: {' '.join(argv)} (see {logfile})")
    rss_kb = usage.ru_maxrss + sum(u.ru_maxrss for u in left)
    cpu_s = sum(u.ru_utime + u.ru_stime for u in [usage, *left])
    return Sample(wall, rss_kb / 1024, returncode, data, cpu_s)  # KB -> MB


def interleave(variants: dict[str, Callable[[int], Sample]], reps: int, case: str) -> dict[str, list[Sample]]:
    """``reps`` rounds; each round runs every variant once, the order rotated by one each round."""
    names = list(variants)
    samples: dict[str, list[Sample]] = {name: [] for name in names}
    for rep in range(reps):
        order = names[rep % len(names):] + names[: rep % len(names)]
        for name in order:
            sample = variants[name](rep)
            samples[name].append(sample)
            log(
                f"  [{case} {rep + 1}/{reps}] {name}: {sample.wall_s:.2f} s, {sample.rss_mb:.0f} MB"
                + (f", loop {sample.report['loop_s']:.3f} s" if "loop_s" in sample.report else "")
            )
    return samples


def median(values: Iterable) -> float:
    kept = [value for value in values if value is not None]
    return statistics.median(kept) if kept else float("nan")


def paired_ratio(numer: list[Sample], denom: list[Sample], key=lambda sample: sample.wall_s) -> float:
    """Median over rounds of key(numer)/key(denom): each round's two runs saw the same load."""
    return median([key(top) / key(bottom) for top, bottom in zip(numer, denom)])


def dir_size(path: Path) -> int:
    return sum(item.stat().st_size for item in Path(path).rglob("*") if item.is_file())


def files_of(path: Path) -> list[str]:
    return sorted(item.name for item in Path(path).iterdir() if not item.name.startswith("."))


def samples_json(results: dict[str, list[Sample]]) -> dict:
    return {name: [asdict(sample) for sample in samples] for name, samples in results.items()}


def ratio_row(name: str, samples: list[Sample], base: list[Sample]) -> dict:
    """Medians of one variant and its ratios to ``base`` (medians and paired)."""
    return {
        "variant": name,
        "wall_s": median(s.wall_s for s in samples),
        "rss_mb": median(s.rss_mb for s in samples),
        "ratio": median(s.wall_s for s in samples) / median(s.wall_s for s in base),
        "paired_ratio": paired_ratio(samples, base),
        "cpu_s": median(s.cpu_s for s in samples),
        "cpu_ratio": median(s.cpu_s for s in samples) / median(s.cpu_s for s in base),
        "extra_mb": median(s.rss_mb for s in samples) - median(s.rss_mb for s in base),
        "failed": sum(s.rc != 0 for s in samples),
    }


# ------------------------------------------------------------------------------------ text
def text_with_tokens(n: int) -> str:
    """A text of exactly ``n`` GPT-2 tokens: the tutorial sentence, repeated."""
    from attnlab.core import tokenizer

    words = [" journey", " starts", " with", " one", " step", " Your"]
    text = "Your" + "".join(words[i % len(words)] for i in range(n - 1))
    got = len(tokenizer.encode(text))
    if got != n:
        raise RuntimeError(f"generated text has {got} tokens, wanted {n}")
    return text


def text_file(work: Path, n: int) -> Path:
    path = work / f"text_{n}.txt"
    if not path.exists():
        path.write_text(text_with_tokens(n), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------ cases
def case_single(work: Path, env: dict, reps: int, quick: bool) -> dict:
    used = {label: overrides for label, overrides in SINGLE_VARIANTS.items()
            if not quick or label in ("default logging", "logging=off")}
    logfile = work / "single.log"
    run_dirs: dict[str, list[Path]] = {label: [] for label in used}

    def attnlab(label: str, overrides: list[str]) -> Callable[[int], Sample]:
        def run(rep: int) -> Sample:
            run_dir = work / "single" / f"{label.replace('=', '_').replace('.', '_').replace(' ', '_')}_{rep}"
            run_dirs[label].append(run_dir)
            return measure([ATTNLAB, f"hydra.run.dir={run_dir}", *overrides], env, logfile)

        return run

    variants = {
        PLAIN_LABEL: lambda rep: measure([PY, PLAIN], env, logfile),
        PLAIN_FIGURE_LABEL: lambda rep: measure([PY, PLAIN, "--figure", str(work / f"plain_figure_{rep}.png")],
                                                env, logfile),
    }
    variants.update({f"attnlab, {label}": attnlab(label, overrides) for label, overrides in used.items()})
    results = interleave(variants, reps, "single")
    plain, plain_figure = results[PLAIN_LABEL], results[PLAIN_FIGURE_LABEL]
    rows = []
    for name, samples in results.items():
        row = ratio_row(name, samples, plain)
        row["figure_ratio"] = median(s.wall_s for s in samples) / median(s.wall_s for s in plain_figure)
        row["figure_paired_ratio"] = paired_ratio(samples, plain_figure)
        label = name.removeprefix("attnlab, ")
        if run_dirs.get(label):
            first = run_dirs[label][0]
            row["files"] = files_of(first) if first.is_dir() else []
        rows.append(row)
    return {"reps": reps, "rows": rows, "samples": samples_json(results)}


def case_loaded(work: Path, env: dict, reps: int, quick: bool) -> dict:
    """2,000 steps, ``logging=off``, while two busy processes keep the cores busy."""
    steps = 300 if quick else LOADED_STEPS
    logfile = work / "loaded.log"
    variants = {
        PLAIN_LABEL: lambda rep: measure([PY, PLAIN, "--steps", str(steps)], env, logfile),
        "attnlab, logging=off": lambda rep: measure(
            [ATTNLAB, f"hydra.run.dir={work / 'loaded' / f'off_{rep}'}", "logging=off", f"train.steps={steps}"],
            env, logfile),
    }
    load_before = os.getloadavg()
    with busy_processes(BUSY_PROCESSES, max_seconds=3600):
        results = interleave(variants, reps, f"loaded, {BUSY_PROCESSES} busy processes")
    plain = results[PLAIN_LABEL]
    rows = [ratio_row(name, samples, plain) for name, samples in results.items()]
    return {"reps": reps, "steps": steps, "busy": BUSY_PROCESSES, "load_before": load_before,
            "load_after": os.getloadavg(), "rows": rows, "samples": samples_json(results)}


def case_sweep(work: Path, env: dict, reps: int, quick: bool) -> dict:
    jobs, steps = (3, 10) if quick else (20, 20)
    logfile = work / "sweep.log"
    common = [f"seed=range(0,{jobs})", f"train.steps={steps}", f"train.snapshot_steps=[0,{steps - 1}]"]

    def sweep(tag: str, extra: list[str]) -> Callable[[int], Sample]:
        return lambda rep: measure(
            [ATTNLAB, "-m", f"hydra.sweep.dir={work / 'sweep' / f'{tag}_{rep}'}", *common, *extra], env, logfile
        )

    variants = {
        f"plain loop, {jobs} trainings": lambda rep: measure(
            [PY, PLAIN, "--repeat", str(jobs), "--steps", str(steps), "--snapshot-steps", f"0,{steps - 1}"],
            env, logfile),
        f"attnlab -m, {jobs} jobs, logging=off": sweep("off", ["logging=off"]),
        f"attnlab -m, {jobs} jobs, default logging": sweep("default", []),
    }
    results = interleave(variants, reps, "sweep")
    names = list(results)
    base = results[names[0]]
    rows = []
    for name in names:
        samples = results[name]
        rows.append({
            "variant": name,
            "wall_s": median(s.wall_s for s in samples),
            "rss_mb": median(s.rss_mb for s in samples),
            "per_job_ms": (median(s.wall_s for s in samples) - median(s.wall_s for s in base)) / jobs * 1000,
            "paired_per_job_ms": median((s.wall_s - b.wall_s) / jobs * 1000 for s, b in zip(samples, base)),
            "cpu_s": median(s.cpu_s for s in samples),
            "cpu_per_job_ms": (median(s.cpu_s for s in samples) - median(s.cpu_s for s in base)) / jobs * 1000,
            "failed": sum(s.rc != 0 for s in samples),
        })
    return {"reps": reps, "jobs": jobs, "steps": steps, "rows": rows, "samples": samples_json(results)}


def _child(work: Path, env: dict, logfile: Path, impl: str, seq_len: int, d_model: int, steps: int,
           snapshots: str, sinks: str = "rundir", overrides: Sequence[str] = ()) -> Callable[[int], Sample]:
    def run(rep: int) -> Sample:
        report = work / f"report_{os.getpid()}.json"
        tag = "_".join(o.replace("=", "-").replace(".", "-") for o in overrides)
        run_dir = work / "runs" / f"{impl}_{sinks}_{seq_len}_{d_model}_{steps}_{snapshots}_{tag}_{rep}"
        argv = [PY, "-m", "benchmarks.child", impl, "--text-file", str(text_file(work, seq_len)),
                "--d-model", str(d_model), "--steps", str(steps), "--snapshots", snapshots, "--report", str(report)]
        if impl == "attnlab":
            argv += ["--run-dir", str(run_dir), "--sinks", sinks, *(f"--override={o}" for o in overrides)]
        sample = measure(argv, env, logfile, report)
        if impl == "attnlab" and run_dir.is_dir():
            sample.report["run_dir_mb"] = dir_size(run_dir) / MB
            sample.report["files"] = files_of(run_dir)
            shutil.rmtree(run_dir, ignore_errors=True)  # 1,000 snapshots at T=256 are 262 MB
        return sample

    return run


def case_scaling(work: Path, env: dict, reps: int, quick: bool) -> dict:
    sizes = [(6, 6, 200)] if quick else SCALING_SIZES
    logfile = work / "scaling.log"
    rows, samples = [], {}
    for seq_len, d_model, steps in sizes:
        variants = {
            "plain": _child(work, env, logfile, "plain", seq_len, d_model, steps, "5"),
            "attnlab": _child(work, env, logfile, "attnlab", seq_len, d_model, steps, "5"),
        }
        results = interleave(variants, reps, f"scaling T={seq_len} d={d_model}")
        plain, ours = results["plain"], results["attnlab"]

        def steps_per_s(sample: Sample) -> float | None:
            return steps / sample.report["loop_s"] if sample.report.get("loop_s") else None

        row = {
            "T": seq_len,
            "d_model": d_model,
            "steps": steps,
            "plain_sps": median(steps_per_s(s) for s in plain),
            "attnlab_sps": median(steps_per_s(s) for s in ours),
            "paired_ratio": median(steps_per_s(a) / steps_per_s(b) for a, b in zip(ours, plain)
                                   if steps_per_s(a) and steps_per_s(b)),
            "plain_total_s": median(s.report.get("total_s") for s in plain),
            "attnlab_total_s": median(s.report.get("total_s") for s in ours),
            "plain_rss_mb": median(s.rss_mb for s in plain),
            "attnlab_rss_mb": median(s.rss_mb for s in ours),
            "run_dir_mb": median(s.report.get("run_dir_mb") for s in ours),
            "failed": sum(s.rc != 0 for s in plain + ours),
        }
        row["ratio"] = row["attnlab_sps"] / row["plain_sps"]
        rows.append(row)
        samples[f"{seq_len}x{d_model}"] = samples_json(results)
    return {"reps": reps, "rows": rows, "samples": samples}


VARIANT_SIZES = [(64, 64, 300), (256, 256, 60)]  # T, d_model, steps (issue 12)


def variant_overrides(d_model: int) -> dict[str, list[str]]:
    """The model variants measured side by side (d_k = d_v = d_model in total over the heads)."""
    return {
        "1 head (default)": [],
        "4 heads": ["model.n_heads=4", f"model.d_k={d_model // 4}", f"model.d_v={d_model // 4}"],
        "8 heads": ["model.n_heads=8", f"model.d_k={d_model // 8}", f"model.d_v={d_model // 8}"],
        "causal": ["model.causal=true"],
        "sdpa": ["model.attention=sdpa"],
        "sdpa, causal": ["model.attention=sdpa", "model.causal=true"],
        "dropout 0.1": ["model.dropout=0.1"],
    }


def case_variants(work: Path, env: dict, reps: int, quick: bool) -> dict:
    """Training-loop steps/s of the model variants and of the plain loop, interleaved."""
    sizes = [(64, 64, 50)] if quick else VARIANT_SIZES
    logfile = work / "variants.log"
    rows, samples = [], {}
    for seq_len, d_model, steps in sizes:
        variants = {"plain loop": _child(work, env, logfile, "plain", seq_len, d_model, steps, "5")}
        for name, overrides in variant_overrides(d_model).items():
            variants[name] = _child(work, env, logfile, "attnlab", seq_len, d_model, steps, "5", overrides=overrides)
        results = interleave(variants, reps, f"variants T={seq_len} d={d_model}")

        def steps_per_s(sample: Sample) -> float | None:
            return steps / sample.report["loop_s"] if sample.report.get("loop_s") else None

        base = median(steps_per_s(s) for s in results["1 head (default)"])
        for name, runs in results.items():
            sps = median(steps_per_s(s) for s in runs)
            rows.append({"T": seq_len, "d_model": d_model, "variant": name, "steps_per_s": sps,
                         "vs_default": sps / base if sps and base else None,
                         "failed": sum(s.rc != 0 for s in runs)})
        samples[f"{seq_len}x{d_model}"] = samples_json(results)
    return {"reps": reps, "rows": rows, "samples": samples}


def case_snapshots(work: Path, env: dict, reps: int, quick: bool, all_sinks: bool) -> dict:
    seq_len, d_model, counts = (32, 16, (10, 40)) if quick else (256, 16, (100, 1000))
    logfile = work / "snapshots.log"
    variants = {}
    for n in counts:
        if not quick:
            variants[f"plain (keeps every snapshot), {n} steps"] = _child(
                work, env, logfile, "plain", seq_len, d_model, n, "all")
        variants[f"attnlab run-dir sink, {n} steps"] = _child(work, env, logfile, "attnlab", seq_len, d_model, n, "all")
    if all_sinks:
        # TensorBoard images cost per snapshot: fewer steps, same question (flat or not?)
        for n in (counts[0] // 4, counts[0]):
            variants[f"attnlab run-dir + TensorBoard (images) + figures, {n} steps"] = _child(
                work, env, logfile, "attnlab", seq_len, d_model, n, "all", sinks="all"
            )
    results = interleave(variants, reps, f"snapshots T={seq_len}")
    rows = []
    for name, samples in results.items():
        rows.append({
            "variant": name,
            "steps": samples[0].report.get("snapshots"),
            "rss_mb": median(s.rss_mb for s in samples),
            "wall_s": median(s.wall_s for s in samples),
            "loop_sps": median((s.report.get("snapshots") or 0) / s.report["loop_s"]
                               for s in samples if s.report.get("loop_s")),
            "total_s": median(s.report.get("total_s") for s in samples),
            "run_dir_mb": median(s.report.get("run_dir_mb") for s in samples),
            "files": samples[0].report.get("files"),
            "failed": sum(s.rc != 0 for s in samples),
        })
    return {"reps": reps, "T": seq_len, "d_model": d_model, "counts": list(counts), "rows": rows,
            "samples": samples_json(results)}


def case_threads(work: Path, env: dict, reps: int, quick: bool) -> dict:
    """Steps/s with 1 and 2 torch threads over :data:`THREAD_GRID`, idle and under load, in one
    child process per condition (``benchmarks/threads_grid.py``)."""
    grid = [(6, 6), (64, 64)] if quick else THREAD_GRID
    sizes = ",".join(f"{seq_len}x{d_model}" for seq_len, d_model in grid)
    logfile = work / "threads.log"
    out: dict = {"reps": reps, "conditions": {}}
    for condition, busy in (("idle", 0), (f"{BUSY_PROCESSES} busy processes", BUSY_PROCESSES)):
        report = work / f"threads_{busy}.json"
        argv = [PY, "-m", "benchmarks.threads_grid", "--sizes", sizes, "--threads", "1,2", "--reps", str(reps),
                "--seconds", "0.1" if quick else "0.3", "--out", str(report)]
        load_before = os.getloadavg()
        with busy_processes(busy, max_seconds=3600):
            sample = measure(argv, env, logfile)
        rows = json.loads(report.read_text(encoding="utf-8")) if report.is_file() else []
        log(f"  [threads, {condition}] {sample.wall_s:.0f} s, {len(rows)} sizes")
        out["conditions"][condition] = {"load_before": load_before, "rows": rows, "failed": int(sample.rc != 0)}
    return out


# ------------------------------------------------------------------------------------ report
def machine() -> dict:
    from importlib import metadata

    def version_of(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    def proc_field(path: str, key: str) -> str | None:
        if not Path(path).exists():
            return None
        return next((line.split(":", 1)[1].strip() for line in Path(path).read_text().splitlines()
                     if line.startswith(key)), None)

    mem_kb = proc_field("/proc/meminfo", "MemTotal")
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True).stdout.strip())
    return {
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "cpu": proc_field("/proc/cpuinfo", "model name") or platform.processor(),
        "cores": os.cpu_count(),
        "ram_gb": round(int(mem_kb.split()[0]) / 1024 / 1024, 1) if mem_kb else None,
        "platform": platform.platform(),
        "python": platform.python_version(),
        **{name: version_of(name) for name in ("attnlab", "torch", "numpy", "hydra-core", "omegaconf", "tiktoken",
                                               "matplotlib", "tensorboard")},
        "git": commit + ("+dirty" if dirty else ""),
        "load_start": os.getloadavg(),
    }


def _files(names) -> list[str]:
    return [name if not name.startswith("events.out.tfevents.") else "events.out.tfevents.*" for name in names or []]


def num(value, spec: str = ".2f") -> str:
    """``value`` formatted with ``spec``; ``n/a`` for None or NaN."""
    return "n/a" if value is None or value != value else format(value, spec)


def _target(name: str, measured: str, ok: bool, target: str) -> tuple[str, str, str, bool]:
    return name, target, measured, ok


def render(results: dict) -> str:
    info = results["machine"]
    reps = ", ".join(f"{case} {results[case]['reps']}" for case in CASES if case in results)
    lines = [
        BEGIN,
        "",
        f"Measured {info['date']} with `{' '.join(['python -m benchmarks.run', *results['argv']])}`"
        f" ({results['seconds']:.0f} s in all; repetitions per case: {reps}).",
        "",
        "Wall = fork to reap of each child process; peak RSS = its `ru_maxrss` (`os.wait4`) plus that of every "
        "process it started (attnlab's render child: the sum of the peaks, an upper bound); CPU = the user + system "
        "seconds of all of them, which another process's load disturbs far less than wall time.",
        "",
        f"- machine: {info['cpu']}, {info['cores']} cores, {info['ram_gb']} GB RAM; {info['platform']}",
        f"- load average (1 min) at start / end: {info['load_start'][0]:.2f} / {results['load_end'][0]:.2f}"
        f"; torch threads: {results['omp_threads'] or 'default (the plain script); attnlab: threads=auto'}",
        f"- Python {info['python']}, torch {info['torch']}, numpy {info['numpy']}, hydra-core {info['hydra-core']}, "
        f"omegaconf {info['omegaconf']}, tiktoken {info['tiktoken']}, matplotlib {info['matplotlib']}, "
        f"tensorboard {info['tensorboard']}; attnlab {info['attnlab']} at {info['git']}",
        "",
    ]
    targets: list[tuple[str, str, str, bool]] = []
    if "single" in results:
        lines += [
            "### Single run: `attnlab` vs the plain section-5 script, without and with its figure",
            "",
            "| variant | wall s (median) | × plain (medians) | (paired) | × plain with figure (medians) | (paired) "
            "| CPU s | CPU × plain | peak RSS MB | + MB vs plain | run-dir files |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
        ]
        for row in results["single"]["rows"]:
            lines.append(
                f"| {row['variant']} | {num(row['wall_s'])} | {num(row['ratio'], '.3f')} | "
                f"{num(row['paired_ratio'], '.3f')} | {num(row['figure_ratio'], '.3f')} | "
                f"{num(row['figure_paired_ratio'], '.3f')} | {num(row['cpu_s'])} | {num(row['cpu_ratio'], '.3f')} | "
                f"{num(row['rss_mb'], '.0f')} | {num(row['extra_mb'], '+.0f')} | "
                f"{', '.join(_files(row.get('files')))} |"
            )
        lines.append("")
        by_name = {row["variant"]: row for row in results["single"]["rows"]}
        default, off = by_name.get("attnlab, default logging"), by_name.get("attnlab, logging=off")
        if default:
            targets.append(_target(
                "default run vs plain script with its figure", f"{default['figure_ratio']:.3f}× "
                f"(paired {default['figure_paired_ratio']:.3f}×)",
                default["figure_ratio"] <= DEFAULT_VS_PLAIN_FIGURE_MAX, f"≤ {DEFAULT_VS_PLAIN_FIGURE_MAX}×"))
        if off:
            targets.append(_target("`logging=off` vs plain script", f"{off['ratio']:.3f}× (paired "
                                   f"{off['paired_ratio']:.3f}×)", off["ratio"] <= OFF_VS_PLAIN_MAX,
                                   f"≤ {OFF_VS_PLAIN_MAX}×"))
        worst = max((row for row in results["single"]["rows"] if row["variant"].startswith("attnlab")),
                    key=lambda row: row["extra_mb"])
        targets.append(_target("single run: peak memory over the plain script (issue 6)",
                               f"{worst['extra_mb']:+.0f} MB (worst: {worst['variant']})",
                               worst["extra_mb"] <= SINGLE_EXTRA_MB, f"≤ +{SINGLE_EXTRA_MB:.0f} MB"))
    if "loaded" in results:
        loaded = results["loaded"]
        lines += [
            f"### Loaded machine: {loaded['steps']:,} steps, `logging=off`, {loaded['busy']} busy processes",
            "",
            f"Two CPU-bound processes started by the benchmark for this case (load average before / after: "
            f"{loaded['load_before'][0]:.2f} / {loaded['load_after'][0]:.2f}); the plain script runs "
            f"`--steps {loaded['steps']}` with torch's default threads, attnlab `train.steps={loaded['steps']}` "
            "with `threads=auto`.",
            "",
            "| variant | wall s (median) | × plain (medians) | (paired) | CPU s | CPU × plain | peak RSS MB |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for row in loaded["rows"]:
            lines.append(f"| {row['variant']} | {num(row['wall_s'])} | {num(row['ratio'], '.3f')} | "
                         f"{num(row['paired_ratio'], '.3f')} | {num(row['cpu_s'])} | {num(row['cpu_ratio'], '.3f')} | "
                         f"{num(row['rss_mb'], '.0f')} |")
        lines.append("")
        ours = next(row for row in loaded["rows"] if row["variant"].startswith("attnlab"))
        targets.append(_target(f"{loaded['steps']:,}-step run, {loaded['busy']} busy processes, `logging=off` vs "
                               "plain", f"{ours['ratio']:.3f}× (paired {ours['paired_ratio']:.3f}×)",
                               ours["ratio"] <= LOADED_VS_PLAIN_MAX, f"≤ {LOADED_VS_PLAIN_MAX}×"))
    if "sweep" in results:
        sweep = results["sweep"]
        lines += [
            f"### Sweep: `attnlab -m` over {sweep['jobs']} seeds ({sweep['steps']} steps each) vs "
            f"{sweep['jobs']} trainings in one plain loop",
            "",
            "| variant | wall s (median) | peak RSS MB | overhead per job, ms (medians) | (paired) | CPU s "
            "| CPU overhead per job, ms |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for row in sweep["rows"]:
            lines.append(
                f"| {row['variant']} | {num(row['wall_s'])} | {num(row['rss_mb'], '.0f')} | "
                f"{num(row['per_job_ms'], '.0f')} | {num(row['paired_per_job_ms'], '.0f')} | {num(row['cpu_s'])} | "
                f"{num(row['cpu_per_job_ms'], '.0f')} |"
            )
        lines.append("")
        for row in sweep["rows"][1:]:
            limit = SWEEP_OFF_MAX_MS if "logging=off" in row["variant"] else SWEEP_DEFAULT_MAX_MS
            targets.append(_target(f"sweep overhead per job, {row['variant'].split(', ')[-1]}",
                                   f"{row['per_job_ms']:.0f} ms (paired {row['paired_per_job_ms']:.0f} ms)",
                                   row["per_job_ms"] <= limit, f"≤ {limit:.0f} ms"))
    if "scaling" in results:
        lines += [
            "### Scaling: training-loop steps per second, d_k = d_v = d_model, 5 snapshots per run",
            "",
            "attnlab = `job.run_job` (the `attnlab` command's job function, run-dir artifacts: metrics.csv, "
            "attention.npz, summary.json; `threads=auto`) in a child process, config composed with Hydra's compose "
            "API; plain = the tutorial's loop (`benchmarks/plain_tutorial.py`, torch's default threads). Steps/s "
            "count the loop only (first step to last, snapshots included); *total* is the whole training call with "
            "torch already imported (set-up, the compiler-stack import, the loop and, for attnlab, summary.json and "
            "the run dir).",
            "",
            "| T | d_model | steps | plain steps/s | attnlab steps/s | × plain (medians) | (paired) | plain total s "
            "| attnlab total s | plain peak MB | attnlab peak MB | run dir MB |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for row in results["scaling"]["rows"]:
            lines.append(
                f"| {row['T']} | {row['d_model']} | {row['steps']} | {num(row['plain_sps'], '.1f')} | "
                f"{num(row['attnlab_sps'], '.1f')} | {num(row['ratio'], '.3f')} | {num(row['paired_ratio'], '.3f')} | "
                f"{num(row['plain_total_s'])} | {num(row['attnlab_total_s'])} | {num(row['plain_rss_mb'], '.0f')} | "
                f"{num(row['attnlab_rss_mb'], '.0f')} | {num(row['run_dir_mb'], '.2f')} |"
            )
        lines.append("")
        worst = min(results["scaling"]["rows"], key=lambda row: row["ratio"])
        targets.append(_target(f"scaling up to (1024, 768), steps/s vs plain ({results['scaling']['reps']} "
                               "repetitions)", f"worst {worst['ratio']:.3f}× (paired {worst['paired_ratio']:.3f}×) at "
                               f"T={worst['T']}, d_model={worst['d_model']}", worst["ratio"] >= SCALING_MIN,
                               f"≥ {SCALING_MIN}× at every size"))
    if "variants" in results:
        lines += [
            "### Model variants (issue 12): training-loop steps per second, `logging=off`",
            "",
            "d_k and d_v per head are d_model / n_heads, so every variant has the same Q/K/V sizes in total; "
            "the plain loop is the tutorial's (one head, explicit). *× default* is each variant's steps/s over "
            "attnlab's default (one head, explicit, no mask, no dropout).",
            "",
            "| T | d_model | variant | steps/s | × default |",
            "| ---: | ---: | --- | ---: | ---: |",
        ]
        for row in results["variants"]["rows"]:
            lines.append(f"| {row['T']} | {row['d_model']} | {row['variant']} | {num(row['steps_per_s'], '.1f')} | "
                         f"{num(row['vs_default'], '.2f')} |")
        lines.append("")
    if "snapshots" in results:
        snaps = results["snapshots"]
        lines += [
            f"### Snapshots at every step, T = {snaps['T']}, d_model = {snaps['d_model']}",
            "",
            "| variant | snapshots | peak RSS MB | loop steps/s | total s | run dir MB | run-dir files |",
            "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
        ]
        for row in snaps["rows"]:
            lines.append(
                f"| {row['variant']} | {row['steps']} | {num(row['rss_mb'], '.0f')} | {num(row['loop_sps'], '.1f')} | "
                f"{num(row['total_s'])} | {num(row['run_dir_mb'], '.1f')} | {', '.join(_files(row['files']))} |"
            )
        lines.append("")
        low, high = snaps["counts"]
        by_name = {row["variant"]: row for row in snaps["rows"]}
        growth = (by_name[f"attnlab run-dir sink, {high} steps"]["rss_mb"]
                  - by_name[f"attnlab run-dir sink, {low} steps"]["rss_mb"])
        targets.append(_target(f"snapshots every step, T={snaps['T']}: memory flat ({low} → {high} steps; issue 6)",
                               f"{growth:+.0f} MB", growth <= SNAPSHOT_GROWTH_MAX_MB,
                               f"≤ +{SNAPSHOT_GROWTH_MAX_MB:.0f} MB"))
    if "threads" in results:
        lines += [
            "### Threads: training steps/s with 1 vs 2 torch threads (`threads=auto`'s measurement)",
            "",
            "attnlab's §5 step (`MultiHeadSelfAttention`, one head, MSE, Adam; d_k = d_v = d_model) "
            "in one process per condition, "
            "`torch.set_num_threads` between runs, the two counts interleaved; *same bits* = the losses of every "
            "count are bitwise identical. Multiply-adds per step as `attnlab.core.threads.work_per_step`.",
            "",
            "| T | d_model | multiply-adds per step | condition | 1 thread steps/s | 2 threads steps/s "
            "| 2 vs 1 (paired) | same bits |",
            "| ---: | ---: | ---: | --- | ---: | ---: | ---: | :---: |",
        ]
        from attnlab.core.threads import work_per_step

        for condition, data in results["threads"]["conditions"].items():
            for row in data["rows"]:
                lines.append(
                    f"| {row['T']} | {row['d_model']} | {work_per_step(row['T'], row['d_model']):.2g} | {condition} "
                    f"(load {data['load_before'][0]:.1f}) | {num(row['sps']['1'], '.1f')} | "
                    f"{num(row['sps']['2'], '.1f')} | {num(row['paired']['2'], '.2f')} | "
                    f"{'yes' if row['identical'] else 'no'} |")
        lines.append("")
    if targets:
        lines += ["### Targets (issue 14; memory: issue 6)", "", "| case | target | measured | met |",
                  "| --- | --- | --- | :---: |"]
        lines += [f"| {name} | {target} | {measured} | {'yes' if ok else '**no**'} |"
                  for name, target, measured, ok in targets]
        lines.append("")
    lines.append(END)
    return "\n".join(lines)


def write_out(path: Path, block: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    if BEGIN in old and END in old:
        head, rest = old.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = (old.rstrip() + "\n\n" if old else "# attnlab benchmarks\n\n") + block + "\n"
    path.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 repetition, fewer variants, small sizes")
    parser.add_argument("--reps", type=int,
                        help="repetitions per case (default: single and scaling 5, loaded, sweep and threads 3, "
                             "snapshots 1; quick 1)")
    parser.add_argument("--only", default=",".join(CASES), help="comma-separated cases")
    parser.add_argument("--threads", type=int, help="OMP_NUM_THREADS for every child (default: torch's default)")
    parser.add_argument("--no-all-sinks", action="store_true",
                        help="skip the snapshot case with the TensorBoard and figure sinks")
    parser.add_argument("--out", type=Path,
                        help="markdown file (default docs/benchmarks.md; quick: outputs/benchmarks-quick.md)")
    parser.add_argument("--json", type=Path, help="raw samples as JSON (default: --out with .json)")
    parser.add_argument("--keep", action="store_true", help="keep the work dir (run dirs, logs)")
    args = parser.parse_args(argv)
    out = args.out or ROOT / ("outputs/benchmarks-quick.md" if args.quick else "docs/benchmarks.md")
    cases = [case.strip() for case in args.only.split(",") if case.strip()]
    unknown = set(cases) - set(CASES)
    if unknown:
        parser.error(f"unknown case(s) {sorted(unknown)}")

    def reps_for(default: int) -> int:
        return args.reps or (1 if args.quick else default)

    env = child_env(args.threads)
    work = Path(tempfile.mkdtemp(prefix="attnlab-bench-"))
    results: dict = {"argv": list(argv if argv is not None else sys.argv[1:]), "omp_threads": args.threads,
                     "machine": machine()}
    adopt_orphans()  # the render children of attnlab runs are measured too
    log(f"benchmark work dir {work}; load {results['machine']['load_start']}")
    started = time.perf_counter()
    try:
        if "single" in cases:
            results["single"] = case_single(work, env, reps_for(5), args.quick)
        if "loaded" in cases:
            results["loaded"] = case_loaded(work, env, reps_for(3), args.quick)
        if "sweep" in cases:
            results["sweep"] = case_sweep(work, env, reps_for(3), args.quick)
        if "scaling" in cases:
            results["scaling"] = case_scaling(work, env, reps_for(5), args.quick)
        if "variants" in cases:
            results["variants"] = case_variants(work, env, reps_for(3), args.quick)
        if "snapshots" in cases:
            results["snapshots"] = case_snapshots(work, env, args.reps or 1, args.quick,
                                                  not (args.no_all_sinks or args.quick))
        if "threads" in cases:
            results["threads"] = case_threads(work, env, reps_for(3), args.quick)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    results["seconds"] = time.perf_counter() - started
    results["load_end"] = os.getloadavg()
    block = render(results)
    write_out(out, block)
    json_path = args.json or out.with_suffix(".json")
    json_path.write_text(json.dumps(results, indent=1, default=str) + "\n", encoding="utf-8")
    print(block)
    log(f"wrote {out} and {json_path} in {results['seconds']:.0f} s")
    failed = [case for case in CASES if case in results and any(
        row.get("failed") for row in (results[case].get("rows") or []))]
    if "threads" in results and any(data["failed"] for data in results["threads"]["conditions"].values()):
        failed.append("threads")
    if failed:
        log(f"some runs failed in: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
