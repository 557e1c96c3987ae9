"""``attnlab-reproduce RUN_DIR [--out DIR]``: re-run a saved run and check it gives the same numbers.

The job is rebuilt from ``RUN_DIR/.hydra/config.yaml`` only, read as data: it is checked
against attnlab's schema (``config.apply_schema``), so a ``_target_`` outside the shipped
torch.optim optimizers, a ``hydra:`` or ``defaults:`` section, or any unknown key is refused
before anything is imported or instantiated. It then runs through the same code path as
``attnlab`` (``job.run_job``) into a new run dir — ``RUN_DIR-repro-<time>`` beside RUN_DIR, or
``--out DIR`` — never into RUN_DIR, and compares ``metrics.csv`` (step, loss) and
``attention.npz`` (steps, weights, tokens, token_ids), or ``walkthrough.npz`` for
``task=walkthrough``, bit for bit.

Output: a warning on stderr for each difference between the environment recorded in
``RUN_DIR/summary.json`` and the current one (printed before running), then one verdict on
stdout: ``reproduced exactly`` or a table of what differs (quantity, first differing step,
largest absolute difference). Exit status 0 identical, 1 different, 2 RUN_DIR is not a run
that can be reproduced (missing, no or unreadable config, incompatible schema, refused
``_target_``, run still running or failed). Errors are one line; ``HYDRA_FULL_ERROR=1``
shows the traceback.

Works for single runs and for any job folder of a sweep (Hydra writes each job's composed
config to ``JOB/.hydra/config.yaml``), whatever launcher made it.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from attnlab import artifacts
from attnlab.errors import AttnlabError, RunDirError

EXIT_SAME = 0
EXIT_DIFFERENT = 1
EXIT_NOT_A_RUN = 2
REPRODUCIBLE = ("completed", "diverged", "interrupted")


@dataclass
class Difference:
    """One quantity that differs. ``step`` is the first differing step (None when the
    quantity has no steps, e.g. ``status``); ``max_abs_diff`` is over the steps both runs have
    (None for non-numeric quantities); ``note`` says what differs in words."""

    quantity: str
    step: int | None = None
    max_abs_diff: float | None = None
    note: str = ""


def load_saved_config(run_dir: Path):
    """``RUN_DIR/.hydra/config.yaml`` as a typed config (``config.apply_schema``), without
    importing or instantiating anything it names. Raises RunDirError (missing, unreadable,
    not a mapping) or ConfigError (refused ``_target_``, incompatible schema), one line each."""
    from omegaconf import DictConfig, OmegaConf

    from attnlab.config import apply_schema
    from attnlab.errors import ConfigError

    path = Path(run_dir) / ".hydra" / "config.yaml"
    if not path.is_file():
        raise RunDirError(f"{path}: missing (RUN_DIR must be a run or sweep-job folder made by attnlab)")
    try:
        saved = OmegaConf.load(path)
    except Exception as err:  # OSError, yaml errors, OmegaConf grammar errors
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise RunDirError(f"{path}: unreadable ({type(err).__name__}: {first})") from None
    if not isinstance(saved, DictConfig):
        raise RunDirError(f"{path}: not a config (a YAML mapping is expected)")
    try:
        return apply_schema(saved)
    except ConfigError as err:
        raise ConfigError(err.key, err.value, f"{err.allowed} (in {path})") from None


def environment_differences(recorded: dict[str, Any] | None, current: dict[str, Any]) -> list[str]:
    """One warning line per key whose value differs between the ``versions`` recorded in a
    run's summary.json and ``current`` (``artifacts.environment()``)."""
    if not recorded:
        return ["warning: summary.json records no environment (versions); cannot check it matches"]
    lines = []
    for key in sorted(set(recorded) | set(current)):
        was, now = recorded.get(key), current.get(key)
        if was != now:
            lines.append(f"warning: {key} differs: {was} when the run was made, {now} now")
    return lines


def _first_and_max(a: np.ndarray, b: np.ndarray, steps: np.ndarray) -> tuple[int | None, float | None]:
    """First step where ``a`` and ``b`` differ (bitwise, along axis 0) and the largest |a-b|."""
    n = min(len(a), len(b))
    a, b = a[:n], b[:n]
    same = (a == b) | (np.isnan(a) & np.isnan(b)) if a.dtype.kind == "f" else a == b
    same = same.reshape(n, -1).all(axis=1)
    bad = np.flatnonzero(~same)
    if not bad.size:
        return None, None
    diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
    return int(steps[bad[0]]), float(np.nanmax(diff)) if np.isfinite(diff).any() else math.inf


def compare_runs(original: Path, reproduction: Path) -> list[Difference]:
    """What differs between two finished run dirs: status, metrics (step, loss), attention
    snapshots (steps, weights, tokens, token_ids), and walkthrough arrays. An empty list
    means bitwise identical. When ``original`` was interrupted, only the steps it recorded
    are compared (the reproduction runs every step)."""
    s_a, s_b = artifacts.read_summary(original), artifacts.read_summary(reproduction)
    diffs: list[Difference] = []
    prefix_only = s_a.get("status") == "interrupted"
    if s_a.get("status") != s_b.get("status") and not prefix_only:
        diffs.append(Difference("status", note=f"{s_a.get('status')} vs {s_b.get('status')}"))
    if (Path(original) / artifacts.WALKTHROUGH).is_file():
        with (np.load(Path(original) / artifacts.WALKTHROUGH) as fa,
              np.load(Path(reproduction) / artifacts.WALKTHROUGH) as fb):
            for key in sorted(set(fa.files) | set(fb.files)):
                if key not in fa.files or key not in fb.files:
                    diffs.append(Difference(key, note="only in one run"))
                elif fa[key].shape != fb[key].shape or not np.array_equal(fa[key], fb[key]):
                    d = (float(np.max(np.abs(fa[key] - fb[key]))) if fa[key].shape == fb[key].shape
                         and fa[key].dtype.kind == "f" else None)
                    diffs.append(Difference(key, max_abs_diff=d, note="differs" if d is not None else
                                            f"shape {fa[key].shape} vs {fb[key].shape}"))
        return diffs
    if not (Path(original) / artifacts.METRICS).is_file() and not (Path(reproduction) / artifacts.METRICS).is_file():
        return diffs

    steps_a, loss_a = artifacts.read_metrics(original)
    steps_b, loss_b = artifacts.read_metrics(reproduction)
    n = len(steps_a) if prefix_only else max(len(steps_a), len(steps_b))
    if len(steps_b) < n or (len(steps_a) != len(steps_b) and not prefix_only):
        diffs.append(Difference("steps_run", step=min(len(steps_a), len(steps_b)),
                                note=f"{len(steps_a)} vs {len(steps_b)} rows"))
    m = min(len(steps_a), len(steps_b))
    if not np.array_equal(steps_a[:m], steps_b[:m]):
        first, _ = _first_and_max(steps_a[:m], steps_b[:m], np.arange(m))
        diffs.append(Difference("step", step=first, note="step column differs (row index shown)"))
    first, worst = _first_and_max(loss_a[:m], loss_b[:m], steps_a[:m])
    if first is not None:
        diffs.append(Difference("loss", step=first, max_abs_diff=worst))

    att_a, att_b = artifacts.read_attention(original), artifacts.read_attention(reproduction)
    for key in ("token_ids", "tokens"):
        if not np.array_equal(att_a[key], att_b[key]):
            diffs.append(Difference(key, note=f"{att_a[key].tolist()[:8]} vs {att_b[key].tolist()[:8]}"))
    sa, sb = att_a["steps"], att_b["steps"]
    if prefix_only:
        sb = sb[: len(sa)]
    if not np.array_equal(sa, sb):
        diffs.append(Difference("snapshot steps", note=f"{sa.tolist()} vs {sb.tolist()}"))
    k = min(len(sa), len(sb))
    wa, wb = att_a["weights"][:k], att_b["weights"][:k]
    if wa.shape != wb.shape:
        diffs.append(Difference("attention weights", note=f"shape {wa.shape} vs {wb.shape}"))
    else:
        first, worst = _first_and_max(wa, wb, sa[:k])
        if first is not None:
            diffs.append(Difference("attention weights", step=first, max_abs_diff=worst))
    return diffs


def format_verdict(diffs: list[Difference]) -> str:
    """``reproduced exactly``, or a header line and a table: quantity, first differing step,
    max abs diff, note."""
    if not diffs:
        return "reproduced exactly"
    rows = [("quantity", "first differing step", "max abs diff", "note")]
    for d in diffs:
        rows.append((d.quantity, "-" if d.step is None else str(d.step),
                     "-" if d.max_abs_diff is None else f"{d.max_abs_diff:.6g}", d.note))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [f"not reproduced: {len(diffs)} quantit{'y differs' if len(diffs) == 1 else 'ies differ'}"]
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return "\n".join(lines)


def default_out(run_dir: Path) -> Path:
    """``RUN_DIR-repro-<YYYYmmdd-HHMMSS.ffffff>`` beside RUN_DIR; for a job of a sweep (its
    folder has ``multirun.yaml``), ``SWEEP_DIR-repro-<time>/JOB`` beside the sweep, so the sweep
    folder keeps only its own jobs (its summary and ``attnlab-compare`` see no extra row)."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S.%f")
    sweep = run_dir.parent
    if (sweep / "multirun.yaml").is_file():
        return sweep.parent / f"{sweep.name}-repro-{stamp}" / run_dir.name
    return run_dir.parent / f"{run_dir.name}-repro-{stamp}"


def reproduce(run_dir: Path, out: Path | None = None, stderr=None) -> tuple[int, Path, list[Difference]]:
    """Re-run ``run_dir`` into ``out`` (default :func:`default_out`) and compare.

    Returns ``(exit status, out, differences)``. Raises RunDirError / ConfigError (one line)
    when ``run_dir`` cannot be reproduced or ``out`` is refused (inside RUN_DIR, or already
    holds a finished run). Environment warnings go to ``stderr`` before the run starts.
    """
    from attnlab.job import run_job

    stderr = stderr or sys.stderr
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir}: not a directory")
    cfg = load_saved_config(run_dir)
    summary_path = run_dir / artifacts.SUMMARY
    try:
        summary = artifacts.read_summary(run_dir)
    except (OSError, ValueError) as err:
        raise RunDirError(f"{summary_path}: unreadable ({type(err).__name__})") from None
    status = summary.get("status")
    if status not in REPRODUCIBLE:
        why = {None: "missing (the run never started)", "running": "says running: the run is still going or was killed",
               "failed": f"says failed: {summary.get('error')}"}.get(status, f"has unknown status {status!r}")
        raise RunDirError(f"{summary_path}: {why}; nothing to reproduce")
    out = Path(out) if out is not None else default_out(run_dir)
    if out.resolve() == run_dir.resolve() or run_dir.resolve() in out.resolve().parents:
        raise RunDirError(f"--out {out}: inside RUN_DIR {run_dir}; a reproduction never writes into the run it checks")
    if artifacts.read_summary(out).get("status") in artifacts.FINISHED:
        raise RunDirError(f"--out {out}: already holds a {artifacts.read_summary(out)['status']} run; "
                          "choose another folder (runs are never overwritten)")
    from attnlab import checks, tokenizer

    checks.validate(cfg)  # value and text checks (ConfigError / TokenizerError) before any folder is made
    tokenizer.tokenize(cfg)

    for line in environment_differences(summary.get("versions"), artifacts.environment(str(cfg.device))):
        print(line, file=stderr)
    if status == "interrupted":
        print(f"note: the run was interrupted after {summary.get('steps_run')} steps; the reproduction runs "
              f"all train.steps={cfg.train.steps} and compares the recorded steps", file=stderr)

    (out / ".hydra").mkdir(parents=True, exist_ok=True)
    artifacts.atomic_write_bytes(out / ".hydra" / "config.yaml", (run_dir / ".hydra" / "config.yaml").read_bytes())
    cfg.logging.console = False  # the verdict is the output; the numbers do not depend on it
    run_job(cfg, out)
    artifacts.write_summary(out, reproduced_from=str(run_dir.resolve()))
    diffs = compare_runs(run_dir, out)
    return (EXIT_SAME if not diffs else EXIT_DIFFERENT), out, diffs


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point; returns the exit status (0 same, 1 different, 2 not a run)."""
    parser = argparse.ArgumentParser(
        prog="attnlab-reproduce",
        description="Re-run a saved attnlab run from RUN_DIR/.hydra/config.yaml into a new folder "
                    "and check metrics.csv and attention.npz are bitwise identical.")
    parser.add_argument("run_dir", metavar="RUN_DIR", type=Path, help="a run folder or a sweep job folder")
    parser.add_argument("--out", metavar="DIR", type=Path, default=None,
                        help="the new run folder (default: RUN_DIR-repro-<time> beside RUN_DIR; "
                             "for a sweep job SWEEP_DIR-repro-<time>/JOB)")
    args = parser.parse_args(argv)
    try:
        code, out, diffs = reproduce(args.run_dir, args.out)
    except AttnlabError as err:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print(f"error: {err}", file=sys.stderr)
        return EXIT_NOT_A_RUN
    print(format_verdict(diffs))
    print(f"reproduction: {out}")
    return code


def console_main() -> None:
    """``attnlab-reproduce`` console script."""
    sys.exit(main())


if __name__ == "__main__":
    console_main()
