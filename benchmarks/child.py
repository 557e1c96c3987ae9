"""One measured training in its own process, for the scaling and snapshot cases of
``benchmarks/run.py`` (peak memory is the child's ``ru_maxrss``, read by the parent).

    python -m benchmarks.child attnlab --text-file F --d-model D --steps N --snapshots K \\
        --run-dir DIR --sinks rundir --report OUT.json
    python -m benchmarks.child plain   --text-file F --d-model D --steps N --snapshots K --report OUT.json

``attnlab`` composes the config with Hydra's compose API (``conf/`` + the overrides below) and
runs :func:`attnlab.commands.job.run_job`, the job function the ``attnlab`` command runs, into
``--run-dir``: ``--sinks rundir`` is ``logging=off`` (run-dir artifacts only: metrics.csv,
attention.npz, summary.json); ``--sinks cli`` keeps the default ``logging`` group, so it gets
whatever ``job.make_sinks`` wires; ``--sinks all`` calls ``training.train`` with the run-dir,
TensorBoard (with images) and figure sinks built explicitly. ``plain`` runs the tutorial's loop
from ``benchmarks/plain_tutorial.py`` on the same tokens and sizes. Both use d_k = d_v = d_model.

``--snapshots K``: K snapshot steps evenly spaced over the run, first and last included;
``--snapshots all``: every step. The report holds ``loop_s`` (first step to the end of the
loop; attnlab: ``summary.json``'s ``wall_time_s``, which stops before the sinks' ``on_end``),
``total_s`` (the whole training call, torch already imported: model set-up, the first optimizer's
import of torch's compiler stack, the loop and, for attnlab, the run dir: summary.json, the sinks'
``on_end`` with attention.npz and figures).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def snapshot_steps(steps: int, spec: str) -> list[int]:
    """``"all"`` -> every step; ``"K"`` -> K steps evenly spaced, 0 and steps-1 included."""
    if spec == "all":
        return list(range(steps))
    k = max(1, min(int(spec), steps))
    if k == 1:
        return [0]
    return sorted({round(i * (steps - 1) / (k - 1)) for i in range(k)})


def run_attnlab(a: argparse.Namespace, snaps: list[int]) -> dict:
    from hydra import compose, initialize_config_module

    from attnlab.commands.hydra_config import register_configs
    from attnlab.outputs import artifacts

    register_configs()
    overrides = [f"text_file={a.text_file}", f"model.d_model={a.d_model}", f"model.d_k={a.d_model}",
                 f"train.steps={a.steps}", "train.snapshot_steps=[0]", "logging.console=false", *a.override]
    if a.sinks == "rundir":
        overrides.append("logging=off")
    with initialize_config_module("attnlab.conf", version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    cfg.train.snapshot_steps = snaps  # a 1,000-element list is faster set here than parsed as an override
    run_dir = Path(a.run_dir)
    t0 = time.perf_counter()
    if a.sinks == "all":
        from attnlab.core import training
        from attnlab.core.config import apply_schema
        from attnlab.outputs.plots import FigureSink
        from attnlab.outputs.tensorboard import TensorBoardSink

        run_dir.mkdir(parents=True, exist_ok=True)
        cfg = apply_schema(cfg)
        sinks = [artifacts.RunDirSink(run_dir), TensorBoardSink(run_dir, images=True), FigureSink(run_dir)]
        result = training.train(cfg, sinks, run_dir=run_dir, keep_snapshots=False)
        status, loop_s = result.status, result.wall_time_s
    else:
        from attnlab.commands.job import run_job

        status = run_job(cfg, run_dir).status
        loop_s = artifacts.read_summary(run_dir)["wall_time_s"]
    total_s = time.perf_counter() - t0
    return {"status": status, "loop_s": loop_s, "total_s": total_s}


def run_plain(a: argparse.Namespace, snaps: list[int]) -> dict:
    from benchmarks.plain_tutorial import gpt2_encoding, train

    enc = gpt2_encoding()
    ids = enc.encode(Path(a.text_file).read_text(encoding="utf-8"))
    t0 = time.perf_counter()
    loop_s, _snapshots = train(ids, None, a.d_model, a.d_model, a.steps, set(snaps), verbose=False)
    return {"status": "completed", "loop_s": loop_s, "total_s": time.perf_counter() - t0}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("impl", choices=["attnlab", "plain"])
    p.add_argument("--text-file", required=True)
    p.add_argument("--d-model", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--snapshots", default="5")
    p.add_argument("--run-dir")
    p.add_argument("--sinks", choices=["rundir", "cli", "all"], default="rundir")
    p.add_argument("--report", required=True)
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="another config override for attnlab (the model variants)")
    a = p.parse_args(argv)
    snaps = snapshot_steps(a.steps, a.snapshots)
    import torch  # noqa: F401  -- imported before the clocks start, for both implementations
    out = run_attnlab(a, snaps) if a.impl == "attnlab" else run_plain(a, snaps)
    out["snapshots"] = len(snaps)
    Path(a.report).write_text(json.dumps(out), encoding="utf-8")


if __name__ == "__main__":
    main()
