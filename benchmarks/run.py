"""attnlab against plain PyTorch: the four speed targets, measured as ratios in one run.

    python -m benchmarks.run                  # ~10 min on 2 quiet cores -> docs/benchmarks.md, .json
    python -m benchmarks.run --quick          # smoke run, ~2 min -> outputs/benchmarks-quick.md
    make bench ARGS="--only startup,sweep --reps 7"

Cases. Each repetition runs a case's variants one after another, the order rotated every
repetition, so a neighbour's load hits every variant alike; tables give medians, the ratio of the
medians and the median of the per-repetition (paired) ratios.

- ``startup``: ``attnlab logging=off`` (tutorial §5, 201 steps) vs ``python -c "import torch"``.
  Target: wall ≤ 1.35×.
- ``default``: ``attnlab`` (default logging) vs ``benchmarks/plain_tutorial.py --figure PATH``
  (the tutorial's §5 code and its figure). Target: wall ≤ 0.80×.
- ``sweep``: ``attnlab -m seed=range(0,20) logging=off`` (20 steps each) vs the same 20 trainings
  in one plain process. Target: (sweep - plain) / 20 ≤ 250 ms per job.
- ``scaling``: training-loop steps/s at (T, d_model) up to (1024, 768), d_k = d_v = d_model,
  ``attnlab.commands.job.run_job`` vs the plain loop (``benchmarks/child.py``). Target: ≥ 0.95×
  at every size.

Every measured thing is its own child process, run to the end: wall seconds from start to exit,
CPU seconds (user + system) from ``resource.getrusage(RUSAGE_CHILDREN)``. Children get torch's
default threads (``OMP_NUM_THREADS`` removed; ``--threads N`` sets it for all) and headless matplotlib.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
ATTNLAB = str(Path(PY).with_name("attnlab"))
PLAIN = str(ROOT / "benchmarks" / "plain_tutorial.py")
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"
CASES = ("startup", "default", "sweep", "scaling")

STARTUP_MAX = 1.35  # attnlab logging=off / python -c "import torch"
DEFAULT_MAX = 0.80  # attnlab (default logging) / plain script drawing its figure
SWEEP_MAX_MS = 250.0  # per job, over the plain loop
SCALING_MIN = 0.95  # attnlab steps/s / plain steps/s, at every size
SWEEP_JOBS, SWEEP_STEPS = 20, 20
SCALING_SIZES = [(6, 6, 2000), (64, 64, 1000), (256, 256, 300), (1024, 768, 20)]  # T, d_model, steps


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


THREADS: int | None = None  # --threads: OMP_NUM_THREADS for every child (None: torch's default)


def child_env() -> dict:
    """This checkout importable, headless matplotlib, torch's default threads unless --threads."""
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["MPLBACKEND"] = "Agg"
    if THREADS:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(THREADS)
    return env


def measure(argv: list[str], logfile: Path) -> dict:
    """Run ``argv`` to its end. Returns wall s, CPU s (user + system), exit code and the last
    stdout line parsed as JSON when it is one (benchmarks/child.py reports that way)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, env=child_env(), cwd=ROOT, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=1800)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(logfile, "a", encoding="utf-8") as out:
        out.write(f"$ {' '.join(argv)}\n{proc.stdout}{proc.stderr}\n")
    if proc.returncode:
        log(f"  ! exit {proc.returncode}: {' '.join(argv)} (see {logfile})")
    report = {}
    lines = proc.stdout.strip().splitlines()
    if lines and lines[-1].startswith("{"):
        report = json.loads(lines[-1])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu, "rc": proc.returncode, **report}


def interleave(variants: dict[str, Callable[[int], dict]], reps: int, case: str) -> dict[str, list[dict]]:
    """``reps`` rounds; each runs every variant once, the order rotated by one each round."""
    names = list(variants)
    samples: dict[str, list[dict]] = {name: [] for name in names}
    for rep in range(reps):
        for name in names[rep % len(names):] + names[:rep % len(names)]:
            sample = variants[name](rep)
            samples[name].append(sample)
            log(f"  [{case} {rep + 1}/{reps}] {name}: {sample['wall_s']:.2f} s wall, {sample['cpu_s']:.2f} s CPU")
    return samples


def median(values) -> float:
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else float("nan")


def ratios(ours: list[dict], base: list[dict], key: str = "wall_s") -> tuple[float, float]:
    """(ratio of the medians, median of the paired ratios)."""
    return (median(s[key] for s in ours) / median(s[key] for s in base),
            median(a[key] / b[key] for a, b in zip(ours, base)))


def failed(*groups: list[dict]) -> int:
    return sum(s["rc"] != 0 for group in groups for s in group)


def text_with_tokens(n: int) -> str:
    """A text of exactly ``n`` GPT-2 tokens: the tutorial sentence, repeated."""
    from attnlab.core import tokenizer

    words = [" journey", " starts", " with", " one", " step", " Your"]
    text = "Your" + "".join(words[i % len(words)] for i in range(n - 1))
    if len(tokenizer.encode(text)) != n:
        raise RuntimeError(f"generated text has {len(tokenizer.encode(text))} tokens, wanted {n}")
    return text


# ------------------------------------------------------------------------------------ cases
def case_startup(work: Path, reps: int, quick: bool) -> dict:
    logfile = work / "startup.log"
    results = interleave({
        "python -c 'import torch'": lambda rep: measure([PY, "-c", "import torch"], logfile),
        "attnlab logging=off": lambda rep: measure(
            [ATTNLAB, f"hydra.run.dir={work / 'startup' / str(rep)}", "logging=off"], logfile),
    }, reps, "startup")
    base, ours = results.values()
    ratio, paired = ratios(ours, base)
    return {"reps": reps, "samples": results, "ratio": ratio, "paired": paired, "met": ratio <= STARTUP_MAX,
            "label": "`attnlab logging=off` vs `python -c \"import torch\"`", "target": f"≤ {STARTUP_MAX}×",
            "measured": f"{ratio:.3f}× (paired {paired:.3f}×)", "failed": failed(base, ours)}


def case_default(work: Path, reps: int, quick: bool) -> dict:
    logfile = work / "default.log"
    results = interleave({
        "plain_tutorial.py --figure": lambda rep: measure([PY, PLAIN, "--figure", str(work / f"plain_{rep}.png")],
                                                          logfile),
        "attnlab (default logging)": lambda rep: measure([ATTNLAB, f"hydra.run.dir={work / 'default' / str(rep)}"],
                                                         logfile),
    }, reps, "default")
    base, ours = results.values()
    ratio, paired = ratios(ours, base)
    run_dir = work / "default" / "0"
    files = sorted(p.name for p in run_dir.iterdir() if not p.name.startswith(".")) if run_dir.is_dir() else []
    return {"reps": reps, "samples": results, "ratio": ratio, "paired": paired, "met": ratio <= DEFAULT_MAX,
            "label": "`attnlab` (default logging) vs the plain script drawing its figure",
            "target": f"≤ {DEFAULT_MAX}×",
            "measured": f"{ratio:.3f}× (paired {paired:.3f}×)", "files": files, "failed": failed(base, ours)}


def case_sweep(work: Path, reps: int, quick: bool) -> dict:
    jobs, steps = (3, 10) if quick else (SWEEP_JOBS, SWEEP_STEPS)
    logfile = work / "sweep.log"
    snaps = f"0,{steps - 1}"
    results = interleave({
        f"plain loop, {jobs} trainings": lambda rep: measure(
            [PY, PLAIN, "--repeat", str(jobs), "--steps", str(steps), "--snapshot-steps", snaps], logfile),
        f"attnlab -m, {jobs} jobs, logging=off": lambda rep: measure(
            [ATTNLAB, "-m", f"hydra.sweep.dir={work / 'sweep' / str(rep)}", f"seed=range(0,{jobs})",
             f"train.steps={steps}", f"train.snapshot_steps=[{snaps}]", "logging=off"], logfile),
    }, reps, "sweep")
    base, ours = results.values()
    per_job = (median(s["wall_s"] for s in ours) - median(s["wall_s"] for s in base)) / jobs * 1000
    paired = median((a["wall_s"] - b["wall_s"]) / jobs * 1000 for a, b in zip(ours, base))
    return {"reps": reps, "jobs": jobs, "steps": steps, "samples": results, "per_job_ms": per_job,
            "paired_ms": paired, "met": per_job <= SWEEP_MAX_MS, "target": f"≤ {SWEEP_MAX_MS:.0f} ms per job",
            "label": f"`attnlab -m`, {jobs} jobs, `logging=off`: overhead per job over a plain loop",
            "measured": f"{per_job:.0f} ms (paired {paired:.0f} ms)", "failed": failed(base, ours)}


def case_scaling(work: Path, reps: int, quick: bool) -> dict:
    logfile = work / "scaling.log"
    rows = []
    for seq_len, d_model, steps in [(6, 6, 200), (64, 64, 100)] if quick else SCALING_SIZES:
        text = work / f"text_{seq_len}.txt"
        text.write_text(text_with_tokens(seq_len), encoding="utf-8")

        def child(impl: str) -> Callable[[int], dict]:
            def run(rep: int) -> dict:
                argv = [PY, "-m", "benchmarks.child", impl, "--text-file", str(text), "--d-model", str(d_model),
                        "--steps", str(steps)]
                run_dir = work / "scaling" / f"{seq_len}_{d_model}_{rep}"
                sample = measure(argv + (["--run-dir", str(run_dir)] if impl == "attnlab" else []), logfile)
                shutil.rmtree(run_dir, ignore_errors=True)
                sample["steps_per_s"] = steps / sample["loop_s"] if sample.get("loop_s") else None
                return sample

            return run

        results = interleave({"plain": child("plain"), "attnlab": child("attnlab")}, reps,
                             f"scaling T={seq_len} d_model={d_model}")
        base, ours = results["plain"], results["attnlab"]
        ok = [(a, b) for a, b in zip(ours, base) if a["steps_per_s"] and b["steps_per_s"]]
        rows.append({"T": seq_len, "d_model": d_model, "steps": steps,
                     "plain_sps": median(s["steps_per_s"] for s in base),
                     "attnlab_sps": median(s["steps_per_s"] for s in ours),
                     "paired": median(a["steps_per_s"] / b["steps_per_s"] for a, b in ok),
                     "samples": results, "failed": failed(base, ours)})
        rows[-1]["ratio"] = rows[-1]["attnlab_sps"] / rows[-1]["plain_sps"]
    worst = min(rows, key=lambda row: row["ratio"])
    return {"reps": reps, "rows": rows, "worst": worst["ratio"], "met": worst["ratio"] >= SCALING_MIN,
            "label": "training loop steps/s vs a plain loop, up to (1024, 768)",
            "target": f"≥ {SCALING_MIN}× at every size",
            "measured": f"worst {worst['ratio']:.3f}× (paired {worst['paired']:.3f}×) at T={worst['T']}, "
                        f"d_model={worst['d_model']}", "failed": sum(row["failed"] for row in rows)}


# ------------------------------------------------------------------------------------ report
def machine() -> dict:
    import importlib.metadata as md

    versions = {}
    for name in ("torch", "numpy", "hydra-core", "omegaconf", "tiktoken", "matplotlib", "tensorboard"):
        try:
            versions[name] = md.version(name)
        except md.PackageNotFoundError:
            versions[name] = "not installed"
    git = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True, text=True)
    branch = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--abbrev-ref", "HEAD"], capture_output=True,
                            text=True)
    return {"cores": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "versions": versions, "code": f"{branch.stdout.strip()} at {git.stdout.strip()}",
            "load_start": os.getloadavg()[0]}


def render(res: dict) -> str:
    m = res["machine"]
    lines = [BEGIN, "", f"Measured {res['when']} with `python -m benchmarks.run {' '.join(res['argv'])}`".rstrip()
             + f" ({res['seconds']:.0f} s), code {m['code']}; {m['cores']} cores, {m['platform']}; load average "
             f"(1 min) {m['load_start']:.2f} at the start, {res['load_end']:.2f} at the end; children's threads: "
             f"{res['threads'] or 'torch default'}; Python {m['python']}, "
             + ", ".join(f"{k} {v}" for k, v in m["versions"].items()) + ".", "",
             "| case | variant | wall s (median) | CPU s (median) |", "| --- | --- | ---: | ---: |"]
    for case in ("startup", "default", "sweep"):
        for name, samples in res.get(case, {}).get("samples", {}).items():
            lines.append(f"| {case} | {name} | {median(s['wall_s'] for s in samples):.2f} | "
                         f"{median(s['cpu_s'] for s in samples):.2f} |")
    if "scaling" in res:
        lines += ["", "| T | d_model | steps | plain steps/s | attnlab steps/s | × plain (medians) | (paired) |",
                  "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        lines += [f"| {r['T']} | {r['d_model']} | {r['steps']} | {r['plain_sps']:.1f} | {r['attnlab_sps']:.1f} | "
                  f"{r['ratio']:.3f} | {r['paired']:.3f} |" for r in res["scaling"]["rows"]]
    lines += ["", "| target | limit | measured | met |", "| --- | --- | --- | :---: |"]
    for case in CASES:
        if case in res:
            c = res[case]
            extra = f" ({c['failed']} runs failed)" if c["failed"] else ""
            met = "yes" if c["met"] else "**no**"
            lines.append(f"| {c['label']} | {c['target']} | {c['measured']}{extra} | {met} |")
    return "\n".join(lines + ["", END])


def write_out(path: Path, block: str) -> None:
    """Replace the block between the markers in ``path`` (text around it is kept)."""
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
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 repetition, small sizes")
    parser.add_argument("--reps", type=int, help="repetitions per case (default 5, scaling and sweep 3; quick 1)")
    parser.add_argument("--only", default=",".join(CASES), help=f"comma-separated cases of {', '.join(CASES)}")
    parser.add_argument("--out", type=Path, help="markdown file (default docs/benchmarks.md; quick: outputs/...)")
    parser.add_argument("--threads", type=int, help="OMP_NUM_THREADS for every child (default: torch's default)")
    args = parser.parse_args(argv)
    global THREADS
    THREADS = args.threads
    cases = [c.strip() for c in args.only.split(",") if c.strip()]
    if set(cases) - set(CASES):
        parser.error(f"unknown case(s) {sorted(set(cases) - set(CASES))}")
    out = args.out or ROOT / ("outputs/benchmarks-quick.md" if args.quick else "docs/benchmarks.md")
    res: dict = {"argv": list(sys.argv[1:] if argv is None else argv), "machine": machine(), "threads": THREADS,
                 "when": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    work = Path(tempfile.mkdtemp(prefix="attnlab-bench-"))
    started = time.perf_counter()
    try:
        for case, run_case, reps in [("startup", case_startup, 5), ("default", case_default, 5),
                                     ("sweep", case_sweep, 3), ("scaling", case_scaling, 3)]:
            if case in cases:
                res[case] = run_case(work, args.reps or (1 if args.quick else reps), args.quick)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    res["seconds"], res["load_end"] = time.perf_counter() - started, os.getloadavg()[0]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
    block = render(res)
    write_out(out, block)
    print(block)
    return 1 if any(res[c]["failed"] for c in cases) else 0


if __name__ == "__main__":
    sys.exit(main())
