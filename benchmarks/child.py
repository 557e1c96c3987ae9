"""One timed training in its own process, for the scaling case of ``benchmarks/run.py``.

    python -m benchmarks.child attnlab --text-file F --d-model D --steps N --run-dir DIR
    python -m benchmarks.child plain   --text-file F --d-model D --steps N

Both train tutorial §5 on the tokens of F with d_k = d_v = d_model and 5 snapshot steps spread
over the run (the first and the last included). ``attnlab``: the config composed with Hydra's
compose API (``attnlab.conf``, ``logging=off``), run by :func:`attnlab.commands.job.run_job`, the
``attnlab`` command's job function (metrics.csv, attention.npz, summary.json in DIR); its loop
time and final loss are summary.json's ``wall_time_s`` and ``final_loss``. ``plain``: the loop of
``benchmarks/plain_tutorial.py``. Prints one JSON line: ``loop_s`` (seconds), ``final_loss``.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def snapshot_steps(steps: int, k: int = 5) -> list[int]:
    """``k`` steps evenly spaced over ``range(steps)``, 0 and steps - 1 included."""
    return sorted({round(i * (steps - 1) / (k - 1)) for i in range(k)}) if steps > 1 else [0]


def run_attnlab(text_file: str, d_model: int, steps: int, run_dir: str) -> dict:
    from hydra import compose, initialize_config_module

    from attnlab.commands.hydra_config import register_configs
    from attnlab.commands.job import run_job

    register_configs()
    overrides = [f"text_file={text_file}", f"model.d_model={d_model}", f"model.d_k={d_model}",
                 f"train.steps={steps}", f"train.snapshot_steps={snapshot_steps(steps)}", "logging=off",
                 "logging.console=false"]
    with initialize_config_module("attnlab.conf", version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    run_job(cfg, Path(run_dir))
    summary = json.loads((Path(run_dir) / "summary.json").read_text(encoding="utf-8"))
    return {"status": summary["status"], "loop_s": summary["wall_time_s"], "final_loss": summary["final_loss"]}


def run_plain(text_file: str, d_model: int, steps: int) -> dict:
    from benchmarks.plain_tutorial import gpt2_encoding, train

    ids = gpt2_encoding().encode(Path(text_file).read_text(encoding="utf-8"))
    loop_s, snapshots = train(ids, None, d_model, d_model, steps, set(snapshot_steps(steps)), verbose=False)
    return {"status": "completed", "loop_s": loop_s, "final_loss": snapshots[-1][1]}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("impl", choices=["attnlab", "plain"])
    p.add_argument("--text-file", required=True)
    p.add_argument("--d-model", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--run-dir", help="attnlab's run dir (required for attnlab)")
    a = p.parse_args(argv)
    import torch  # noqa: F401  -- imported before either clock starts
    if a.impl == "attnlab":
        out = run_attnlab(a.text_file, a.d_model, a.steps, a.run_dir)
    else:
        out = run_plain(a.text_file, a.d_model, a.steps)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
