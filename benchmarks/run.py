"""attnlab side by side with plain PyTorch: one command, every case, results written down.

    python -m benchmarks.run                 # full run (~10 min on 2 cores) -> docs/benchmarks.md
    python -m benchmarks.run --quick         # smoke run (~1 min) -> outputs/benchmarks-quick.md
    make bench ARGS="--only single,sweep --reps 7"

Cases (each repetition of a case runs its variants one after another, the order rotated every
repetition, so a noisy neighbour hits every variant alike; tables quote medians and ratios):

- ``single``: the ``attnlab`` command (default logging; each logging option off; ``logging=off``)
  against ``benchmarks/plain_tutorial.py`` (tutorial §5, no Hydra, no logging): wall time and peak
  RSS of each process (``os.wait4`` rusage).
- ``sweep``: ``attnlab -m`` over 20 seeds with a few steps each, against the same 20 trainings
  in one plain process: overhead per job in ms.
- ``scaling``: (T, d_model) in (6, 6), (64, 64), (256, 256), (1024, 768), d_k = d_v = d_model,
  text = a generated file of exactly T GPT-2 tokens, 5 snapshots per run; attnlab's job function
  (``job.run_job`` with run-dir artifacts, via ``benchmarks/child.py``) against the plain loop:
  steps per second of the training loop, peak RSS.
- ``snapshots``: a snapshot at every step at T = 256 for 100 and 1,000 steps: peak RSS (flat or
  growing?), run-dir size.

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
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
ATTNLAB = str(Path(PY).with_name("attnlab"))
PLAIN = str(ROOT / "benchmarks" / "plain_tutorial.py")
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
MB = 1024 * 1024

# targets of issue 6
SINGLE_OFF_MAX, SINGLE_DEFAULT_MAX, SINGLE_EXTRA_MB = 1.05, 1.25, 80.0
SWEEP_MAX_MS = 100.0
SCALING_MIN = 0.95
SNAPSHOT_GROWTH_MAX_MB = 10.0  # "flat": what 1,000 snapshots at T=256 would hold is ~236 MB more

SINGLE_VARIANTS = {  # label -> overrides
    "default logging": [],
    "logging.tensorboard=false": ["logging.tensorboard=false"],
    "logging.images=false": ["logging.images=false"],
    "logging.figures=false": ["logging.figures=false"],
    "logging=off": ["logging=off"],
}
SCALING_SIZES = [(6, 6), (64, 64), (256, 256), (1024, 768)]


@dataclass
class Sample:
    """One child process: wall seconds, peak RSS (MB), exit status, and what it reported."""

    wall_s: float
    rss_mb: float
    rc: int
    report: dict = field(default_factory=dict)
    cpu_s: float = 0.0  # user + system CPU seconds of the child (and its waited-for children)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def child_env(threads: int | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    return env


def measure(argv: list[str], env: dict, logfile: Path, report: Path | None = None, timeout: float = 900) -> Sample:
    """Run ``argv`` to the end; wall time from fork to reap, peak RSS from ``os.wait4``."""
    with open(logfile, "ab") as out:
        out.write(("$ " + " ".join(argv) + "\n").encode())
        out.flush()
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=out, stdin=subprocess.DEVNULL, env=env, cwd=ROOT)
        deadline = t0 + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.002)
        wall = time.perf_counter() - t0
    proc.returncode = rc = os.waitstatus_to_exitcode(status)
    data = {}
    if report is not None and report.is_file():
        data = json.loads(report.read_text(encoding="utf-8"))
        report.unlink()
    if rc != 0:
        log(f"  ! exit {rc}: {' '.join(argv)} (see {logfile})")
    return Sample(wall, usage.ru_maxrss / 1024, rc, data, usage.ru_utime + usage.ru_stime)  # ru_maxrss: KB


def interleave(variants: dict[str, Callable[[int], Sample]], reps: int, case: str) -> dict[str, list[Sample]]:
    """``reps`` rounds; each round runs every variant once, the order rotated by one each round."""
    names = list(variants)
    out: dict[str, list[Sample]] = {n: [] for n in names}
    for r in range(reps):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            s = variants[name](r)
            out[name].append(s)
            log(
                f"  [{case} {r + 1}/{reps}] {name}: {s.wall_s:.2f} s, {s.rss_mb:.0f} MB"
                + (f", loop {s.report['loop_s']:.3f} s" if "loop_s" in s.report else "")
            )
    return out


def med(xs) -> float:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else float("nan")


def paired_ratio(a: list[Sample], b: list[Sample], key=lambda s: s.wall_s) -> float:
    """Median over rounds of key(a)/key(b): each round's two runs saw the same machine load."""
    return med([key(x) / key(y) for x, y in zip(a, b)])


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def files_of(path: Path) -> list[str]:
    return sorted(p.name for p in Path(path).iterdir() if not p.name.startswith("."))


# ------------------------------------------------------------------------------------ text
def text_with_tokens(n: int) -> str:
    """A text of exactly ``n`` GPT-2 tokens: the tutorial sentence, repeated."""
    from attnlab import tokenizer

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
    variants_used = {k: v for k, v in SINGLE_VARIANTS.items() if not quick or k == "logging=off"}
    logf = work / "single.log"
    runs: dict[str, list[Path]] = {k: [] for k in variants_used}

    def attnlab(label: str, overrides: list[str]) -> Callable[[int], Sample]:
        def go(r: int) -> Sample:
            run_dir = work / "single" / f"{label.replace('=', '_').replace('.', '_').replace(' ', '_')}_{r}"
            runs[label].append(run_dir)
            return measure([ATTNLAB, f"hydra.run.dir={run_dir}", *overrides], env, logf)

        return go

    variants = {"plain script": lambda r: measure([PY, PLAIN], env, logf)}
    variants.update({f"attnlab, {k}": attnlab(k, v) for k, v in variants_used.items()})
    res = interleave(variants, reps, "single")
    base = res["plain script"]
    rows = []
    for name, samples in res.items():
        row = {
            "variant": name,
            "wall_s": med(s.wall_s for s in samples),
            "rss_mb": med(s.rss_mb for s in samples),
            "ratio": med(s.wall_s for s in samples) / med(s.wall_s for s in base),
            "paired_ratio": paired_ratio(samples, base),
            "cpu_s": med(s.cpu_s for s in samples),
            "cpu_ratio": med(s.cpu_s for s in samples) / med(s.cpu_s for s in base),
            "extra_mb": med(s.rss_mb for s in samples) - med(s.rss_mb for s in base),
            "failed": sum(s.rc != 0 for s in samples),
        }
        label = name.removeprefix("attnlab, ")
        if label in runs and runs[label]:
            d = runs[label][0]
            row["files"] = files_of(d) if d.is_dir() else []
            row["run_dir_kb"] = dir_size(d) / 1024 if d.is_dir() else None
        rows.append(row)
    return {"reps": reps, "rows": rows, "samples": {k: [asdict(s) for s in v] for k, v in res.items()}}


def case_sweep(work: Path, env: dict, reps: int, quick: bool) -> dict:
    jobs, steps = (3, 10) if quick else (20, 20)
    logf = work / "sweep.log"
    common = [f"seed=range(0,{jobs})", f"train.steps={steps}", f"train.snapshot_steps=[0,{steps - 1}]"]

    def sweep(tag: str, extra: list[str]) -> Callable[[int], Sample]:
        return lambda r: measure(
            [ATTNLAB, "-m", f"hydra.sweep.dir={work / 'sweep' / f'{tag}_{r}'}", *common, *extra], env, logf
        )

    variants = {
        f"plain loop, {jobs} trainings": lambda r: measure(
            [PY, PLAIN, "--repeat", str(jobs), "--steps", str(steps), "--snapshot-steps", f"0,{steps - 1}"], env, logf
        ),
        f"attnlab -m, {jobs} jobs, logging=off": sweep("off", ["logging=off"]),
    }
    if not quick:
        variants[f"attnlab -m, {jobs} jobs, default logging"] = sweep("default", [])
    res = interleave(variants, reps, "sweep")
    names = list(res)
    base = res[names[0]]
    rows = []
    for name in names:
        samples = res[name]
        rows.append(
            {
                "variant": name,
                "wall_s": med(s.wall_s for s in samples),
                "rss_mb": med(s.rss_mb for s in samples),
                "per_job_ms": (med(s.wall_s for s in samples) - med(s.wall_s for s in base)) / jobs * 1000,
                "paired_per_job_ms": med((s.wall_s - b.wall_s) / jobs * 1000 for s, b in zip(samples, base)),
                "cpu_s": med(s.cpu_s for s in samples),
                "cpu_per_job_ms": (med(s.cpu_s for s in samples) - med(s.cpu_s for s in base)) / jobs * 1000,
                "failed": sum(s.rc != 0 for s in samples),
            }
        )
    return {
        "reps": reps,
        "jobs": jobs,
        "steps": steps,
        "rows": rows,
        "samples": {k: [asdict(s) for s in v] for k, v in res.items()},
    }


def _child(
    work: Path,
    env: dict,
    logf: Path,
    impl: str,
    T: int,
    d: int,
    steps: int,
    snapshots: str,
    sinks: str = "rundir",
    tag: str = "",
) -> Callable[[int], Sample]:
    def go(r: int) -> Sample:
        report = work / f"report_{os.getpid()}.json"
        run_dir = work / "runs" / f"{impl}_{sinks}_{T}_{d}_{steps}_{snapshots}{tag}_{r}"
        argv = [
            PY,
            "-m",
            "benchmarks.child",
            impl,
            "--text-file",
            str(text_file(work, T)),
            "--d-model",
            str(d),
            "--steps",
            str(steps),
            "--snapshots",
            snapshots,
            "--report",
            str(report),
        ]
        if impl == "attnlab":
            argv += ["--run-dir", str(run_dir), "--sinks", sinks]
        s = measure(argv, env, logf, report)
        if impl == "attnlab" and run_dir.is_dir():
            s.report["run_dir_mb"] = dir_size(run_dir) / MB
            s.report["files"] = files_of(run_dir)
            shutil.rmtree(run_dir, ignore_errors=True)  # 1,000 snapshots at T=256 are 262 MB
        return s

    return go


def case_scaling(work: Path, env: dict, reps: int, quick: bool) -> dict:
    sizes = [(6, 6, 200)] if quick else [(6, 6, 2000), (64, 64, 1000), (256, 256, 300), (1024, 768, 20)]
    logf = work / "scaling.log"
    rows, samples = [], {}
    for T, d, steps in sizes:
        variants = {
            "plain": _child(work, env, logf, "plain", T, d, steps, "5"),
            "attnlab": _child(work, env, logf, "attnlab", T, d, steps, "5"),
        }
        res = interleave(variants, reps, f"scaling T={T} d={d}")
        p, a = res["plain"], res["attnlab"]
        sps = lambda s: steps / s.report["loop_s"] if s.report.get("loop_s") else None  # noqa: E731
        row = {
            "T": T,
            "d_model": d,
            "steps": steps,
            "plain_sps": med(sps(s) for s in p),
            "attnlab_sps": med(sps(s) for s in a),
            "paired_ratio": med(sps(x) / sps(y) for x, y in zip(a, p) if sps(x) and sps(y)),
            "plain_total_s": med(s.report.get("total_s") for s in p),
            "attnlab_total_s": med(s.report.get("total_s") for s in a),
            "plain_rss_mb": med(s.rss_mb for s in p),
            "attnlab_rss_mb": med(s.rss_mb for s in a),
            "run_dir_mb": med(s.report.get("run_dir_mb") for s in a),
            "failed": sum(s.rc != 0 for s in p + a),
        }
        row["ratio"] = row["attnlab_sps"] / row["plain_sps"]
        rows.append(row)
        samples[f"{T}x{d}"] = {k: [asdict(s) for s in v] for k, v in res.items()}
    return {"reps": reps, "rows": rows, "samples": samples}


def case_snapshots(work: Path, env: dict, reps: int, quick: bool, all_sinks: bool) -> dict:
    T, d, counts = (32, 16, (10, 40)) if quick else (256, 16, (100, 1000))
    logf = work / "snapshots.log"
    variants = {}
    for n in counts:
        if not quick:
            variants[f"plain (keeps every snapshot), {n} steps"] = _child(work, env, logf, "plain", T, d, n, "all")
        variants[f"attnlab run-dir sink, {n} steps"] = _child(work, env, logf, "attnlab", T, d, n, "all")
    if all_sinks:
        # TensorBoard images are ~0.1 s per snapshot: fewer steps, same question (flat or not?)
        for n in (counts[0] // 4, counts[0]):
            variants[f"attnlab run-dir + TensorBoard (images) + figures, {n} steps"] = _child(
                work, env, logf, "attnlab", T, d, n, "all", sinks="all"
            )
    res = interleave(variants, reps, f"snapshots T={T}")
    rows = []
    for name, samples in res.items():
        rows.append(
            {
                "variant": name,
                "steps": samples[0].report.get("snapshots"),
                "rss_mb": med(s.rss_mb for s in samples),
                "wall_s": med(s.wall_s for s in samples),
                "loop_sps": med(
                    (s.report.get("snapshots") or 0) / s.report["loop_s"] for s in samples if s.report.get("loop_s")
                ),
                "total_s": med(s.report.get("total_s") for s in samples),
                "run_dir_mb": med(s.report.get("run_dir_mb") for s in samples),
                "files": samples[0].report.get("files"),
                "failed": sum(s.rc != 0 for s in samples),
            }
        )
    return {
        "reps": reps,
        "T": T,
        "d_model": d,
        "counts": list(counts),
        "rows": rows,
        "samples": {k: [asdict(s) for s in v] for k, v in res.items()},
    }


# ------------------------------------------------------------------------------------ report
def machine() -> dict:
    from importlib import metadata

    def v(dist):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    cpu = (
        next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            platform.processor(),
        )
        if Path("/proc/cpuinfo").exists()
        else platform.processor()
    )
    mem = (
        next(
            (
                int(line.split()[1]) // 1024
                for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal")
            ),
            None,
        )
        if Path("/proc/meminfo").exists()
        else None
    )
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = bool(
        subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
        ).stdout.strip()
    )
    return {
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "ram_gb": round(mem / 1024, 1) if mem else None,
        "platform": platform.platform(),
        "python": platform.python_version(),
        **{
            name: v(name)
            for name in (
                "attnlab",
                "torch",
                "numpy",
                "hydra-core",
                "omegaconf",
                "tiktoken",
                "matplotlib",
                "tensorboard",
            )
        },
        "git": commit + ("+dirty" if dirty else ""),
        "load_start": os.getloadavg(),
    }


def _files(names) -> list[str]:
    return [n if not n.startswith("events.out.tfevents.") else "events.out.tfevents.*" for n in names or []]


def f(x, fmt=".2f") -> str:
    return "n/a" if x is None or x != x else format(x, fmt)


def render(res: dict, args: argparse.Namespace) -> str:
    m = res["machine"]
    L = [
        BEGIN,
        "",
        f"Measured {m['date']} with `{' '.join(['python -m benchmarks.run', *res['argv']])}`"
        f" ({res['seconds']:.0f} s in all; repetitions per case: "
        + ", ".join(f"{c} {res[c]['reps']}" for c in ("single", "sweep", "scaling", "snapshots") if c in res)
        + ").",
        "",
        "Wall = fork to reap of each child process; peak RSS = its `ru_maxrss` (`os.wait4`); CPU = its user + "
        "system seconds, which another process's load disturbs far less than wall time.",
        "",
        f"- machine: {m['cpu']}, {m['cores']} cores, {m['ram_gb']} GB RAM; {m['platform']}",
        f"- load average (1 min) at start / end: {m['load_start'][0]:.2f} / {res['load_end'][0]:.2f}"
        f"; torch threads: {res['threads'] or 'default'}",
        f"- Python {m['python']}, torch {m['torch']}, numpy {m['numpy']}, hydra-core {m['hydra-core']}, "
        f"omegaconf {m['omegaconf']}, tiktoken {m['tiktoken']}, matplotlib {m['matplotlib']}, "
        f"tensorboard {m['tensorboard']}; attnlab {m['attnlab']} at {m['git']}",
        "",
    ]
    checks = []
    if "single" in res:
        L += [
            "### Single run: `attnlab` vs the plain section-5 script",
            "",
            "| variant | wall s (median) | × plain (medians) | × plain (paired) | CPU s | CPU × plain | peak RSS MB | + MB vs plain | run-dir files |",  # noqa: E501 (a markdown table row)
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
        ]
        for r in res["single"]["rows"]:
            files = ", ".join(_files(r.get("files")))
            L.append(
                f"| {r['variant']} | {f(r['wall_s'])} | {f(r['ratio'], '.3f')} | {f(r['paired_ratio'], '.3f')} | "
                f"{f(r['cpu_s'])} | {f(r['cpu_ratio'], '.3f')} | "
                f"{f(r['rss_mb'], '.0f')} | {f(r['extra_mb'], '+.0f')} | {files} |"
            )
        L.append("")
        by = {r["variant"]: r for r in res["single"]["rows"]}
        off, dflt = by.get("attnlab, logging=off"), by.get("attnlab, default logging")
        if off:
            checks.append(
                (
                    "single run, logging=off: wall ≤ 1.05× plain",
                    f"{off['ratio']:.3f}× (paired {off['paired_ratio']:.3f}×)",
                    off["ratio"] <= SINGLE_OFF_MAX,
                )
            )
        if dflt:
            checks.append(
                (
                    "single run, default logging: wall ≤ 1.25× plain",
                    f"{dflt['ratio']:.3f}× (paired {dflt['paired_ratio']:.3f}×)",
                    dflt["ratio"] <= SINGLE_DEFAULT_MAX,
                )
            )
        worst = max((r for r in res["single"]["rows"] if r["variant"] != "plain script"), key=lambda r: r["extra_mb"])
        checks.append(
            (
                "single run: peak memory ≤ plain + 80 MB",
                f"{worst['extra_mb']:+.0f} MB (worst: {worst['variant']})",
                worst["extra_mb"] <= SINGLE_EXTRA_MB,
            )
        )
    if "sweep" in res:
        s = res["sweep"]
        L += [
            f"### Sweep: `attnlab -m` over {s['jobs']} seeds ({s['steps']} steps each) vs {s['jobs']} trainings in one plain loop",  # noqa: E501 (a markdown table row)
            "",
            "| variant | wall s (median) | peak RSS MB | overhead per job, ms (medians) | (paired) | CPU s | CPU overhead per job, ms |",  # noqa: E501 (a markdown table row)
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for r in s["rows"]:
            L.append(
                f"| {r['variant']} | {f(r['wall_s'])} | {f(r['rss_mb'], '.0f')} | {f(r['per_job_ms'], '.0f')} | "
                f"{f(r['paired_per_job_ms'], '.0f')} | {f(r['cpu_s'])} | {f(r['cpu_per_job_ms'], '.0f')} |"
            )
        L.append("")
        worst = max(s["rows"][1:], key=lambda r: r["per_job_ms"])
        checks.append(
            (
                "sweep: ≤ 100 ms overhead per job",
                f"{worst['per_job_ms']:.0f} ms (worst: {worst['variant']})",
                worst["per_job_ms"] <= SWEEP_MAX_MS,
            )
        )
    if "scaling" in res:
        L += [
            "### Scaling: training-loop steps per second, d_k = d_v = d_model, 5 snapshots per run",
            "",
            "attnlab = `job.run_job` (the `attnlab` command's job function, run-dir artifacts: metrics.csv, "
            "attention.npz, summary.json) in a child process, config composed with Hydra's compose API; "
            "plain = the tutorial's loop (`benchmarks/plain_tutorial.py`). Steps/s count the loop only "
            "(first step to last, snapshots included); *total* is the whole training call with torch already imported "
            "(set-up, the compiler-stack import, the loop and, for attnlab, summary.json and the run dir).",
            "",
            "| T | d_model | steps | plain steps/s | attnlab steps/s | × plain (medians) | (paired) | plain total s | attnlab total s | plain peak MB | attnlab peak MB | run dir MB |",  # noqa: E501 (a markdown table row)
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for r in res["scaling"]["rows"]:
            L.append(
                f"| {r['T']} | {r['d_model']} | {r['steps']} | {f(r['plain_sps'], '.1f')} | {f(r['attnlab_sps'], '.1f')} | "  # noqa: E501 (a markdown table row)
                f"{f(r['ratio'], '.3f')} | {f(r['paired_ratio'], '.3f')} | {f(r['plain_total_s'])} | {f(r['attnlab_total_s'])} | "  # noqa: E501 (a markdown table row)
                f"{f(r['plain_rss_mb'], '.0f')} | {f(r['attnlab_rss_mb'], '.0f')} | {f(r['run_dir_mb'], '.2f')} |"
            )
        L.append("")
        worst = min(res["scaling"]["rows"], key=lambda r: r["ratio"])
        checks.append(
            (
                "scaling: ≥ 0.95× plain steps/s at every size",
                f"worst {worst['ratio']:.3f}× (paired {worst['paired_ratio']:.3f}×) at T={worst['T']}, d_model={worst['d_model']}",  # noqa: E501 (a markdown table row)
                worst["ratio"] >= SCALING_MIN,
            )
        )
    if "snapshots" in res:
        s = res["snapshots"]
        L += [
            f"### Snapshots at every step, T = {s['T']}, d_model = {s['d_model']}",
            "",
            "| variant | snapshots | peak RSS MB | loop steps/s | total s | run dir MB | run-dir files |",
            "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
        ]
        for r in s["rows"]:
            L.append(
                f"| {r['variant']} | {r['steps']} | {f(r['rss_mb'], '.0f')} | {f(r['loop_sps'], '.1f')} | {f(r['total_s'])} | "  # noqa: E501 (a markdown table row)
                f"{f(r['run_dir_mb'], '.1f')} | {', '.join(_files(r['files']))} |"
            )
        L.append("")
        lo, hi = s["counts"]
        by = {r["variant"]: r for r in s["rows"]}
        a_lo, a_hi = by[f"attnlab run-dir sink, {lo} steps"], by[f"attnlab run-dir sink, {hi} steps"]
        growth = a_hi["rss_mb"] - a_lo["rss_mb"]
        checks.append(
            (
                f"snapshots every step, T={s['T']}: memory flat ({lo} → {hi} steps)",
                f"{growth:+.0f} MB (run dir {f(a_hi['run_dir_mb'], '.0f')} MB)",
                growth <= SNAPSHOT_GROWTH_MAX_MB,
            )
        )
    if checks:
        L += ["### Targets (issue 6)", "", "| target | measured | met |", "| --- | --- | :---: |"]
        L += [f"| {t} | {v} | {'yes' if ok else '**no**'} |" for t, v, ok in checks]
        L.append("")
    L.append(END)
    return "\n".join(L)


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
    p = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smoke run: 1 repetition, fewer variants, small sizes")
    p.add_argument("--reps", type=int, help="repetitions per case (default 5; sweep and scaling 3; quick 1)")
    p.add_argument("--only", default="single,sweep,scaling,snapshots", help="comma-separated cases")
    p.add_argument("--threads", type=int, help="OMP_NUM_THREADS for every child (default: torch's default)")
    p.add_argument(
        "--no-all-sinks", action="store_true", help="skip the snapshot case with the TensorBoard and figure sinks"
    )
    p.add_argument(
        "--out", type=Path, help="markdown file (default docs/benchmarks.md; quick: outputs/benchmarks-quick.md)"
    )
    p.add_argument("--json", type=Path, help="raw samples as JSON (default: --out with .json)")
    p.add_argument("--keep", action="store_true", help="keep the work dir (run dirs, logs)")
    args = p.parse_args(argv)
    out = args.out or ROOT / ("outputs/benchmarks-quick.md" if args.quick else "docs/benchmarks.md")
    cases = [c.strip() for c in args.only.split(",") if c.strip()]
    unknown = set(cases) - {"single", "sweep", "scaling", "snapshots"}
    if unknown:
        p.error(f"unknown case(s) {sorted(unknown)}")
    reps = args.reps or (1 if args.quick else 5)
    env = child_env(args.threads)
    work = Path(tempfile.mkdtemp(prefix="attnlab-bench-"))
    res: dict = {
        "argv": list(argv if argv is not None else sys.argv[1:]),
        "reps": reps,
        "threads": args.threads,
        "machine": machine(),
    }
    log(f"benchmark work dir {work}; load {res['machine']['load_start']}")
    t0 = time.perf_counter()
    try:
        if "single" in cases:
            res["single"] = case_single(work, env, reps, args.quick)
        if "sweep" in cases:
            res["sweep"] = case_sweep(work, env, args.reps or (1 if args.quick else 3), args.quick)
        if "scaling" in cases:
            res["scaling"] = case_scaling(work, env, args.reps or (1 if args.quick else 3), args.quick)
        if "snapshots" in cases:
            res["snapshots"] = case_snapshots(
                work, env, args.reps or 1, args.quick, not (args.no_all_sinks or args.quick)
            )
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    res["seconds"] = time.perf_counter() - t0
    res["load_end"] = os.getloadavg()
    block = render(res, args)
    write_out(out, block)
    json_path = args.json or out.with_suffix(".json")
    json_path.write_text(json.dumps(res, indent=1, default=str) + "\n", encoding="utf-8")
    print(block)
    log(f"wrote {out} and {json_path} in {res['seconds']:.0f} s")
    failed = [
        c
        for c in ("single", "sweep", "scaling", "snapshots")
        if c in res and any(r.get("failed") for r in res[c]["rows"])
    ]
    if failed:
        log(f"some runs failed in: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
