"""A config folder someone else made (--config-dir, --config-path, hydra.searchpath) is data: the
configs Hydra would compose from it are composed first and every Hydra setting it may not make is
one line, exit 2, with nothing instantiated, opened or written (attnlab.commands.config_folder)."""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import run_here

QUIET = ("logging=off", "logging.console=false", "train.steps=2")


def hostile(name: str, body: str, marker: Path, victim: Path) -> str:
    return f"# @package _global_\n{body.format(marker=marker, victim=victim)}"


MEMBERS = {  # preset name -> (its text below `# @package _global_`, the key the line names)
    "callback": ("hydra:\n  callbacks:\n    evil:\n      _target_: builtins.open\n      file: {marker}\n      mode: w\n",
                 "hydra.callbacks.evil"),
    "job_log": ("hydra:\n  job_logging:\n    handlers:\n      f:\n        class: logging.FileHandler\n"
                "        filename: {victim}\n        mode: w\n    root:\n      handlers: [f]\n", "hydra.job_logging"),
    "hydra_log": ("hydra:\n  hydra_logging:\n    handlers:\n      f:\n        class: logging.FileHandler\n"
                  "        filename: {victim}\n        mode: w\n", "hydra.hydra_logging.handlers"),
    "formatter": ("hydra:\n  job_logging:\n    formatters:\n      x:\n        (): builtins.open\n"
                  "        file: {marker}\n        mode: w\n", "hydra.job_logging.formatters"),
    "launcher": ("hydra:\n  launcher:\n    _target_: os.system\n", "hydra.launcher._target_"),
    "sweeper": ("hydra:\n  sweeper:\n    _target_: builtins.open\n", "hydra.sweeper._target_"),
    "env": ("hydra:\n  job:\n    env_set:\n      PYTHONSTARTUP: {marker}\n", "hydra.job.env_set.PYTHONSTARTUP"),
    "run_dir_abs": ("hydra:\n  run:\n    dir: {victim.parent}/sub\n", "hydra.run.dir"),
    "run_dir_up": ("hydra:\n  run:\n    dir: ../elsewhere\n", "hydra.run.dir"),
    "run_dir_env": ("hydra:\n  run:\n    dir: ${{oc.env:HOME}}/x\n", "hydra.run.dir"),
    "into_run": ("hydra:\n  run:\n    dir: other_run/sub\n", "hydra.run.dir"),
    "sweep_dir_abs": ("hydra:\n  sweep:\n    dir: {victim.parent}\n", "hydra.sweep.dir"),
    "pull_callbacks": ("defaults:\n  - override /hydra/callbacks: evil\n", "hydra.callbacks.evil"),
}


@pytest.fixture
def classroom(tmp_path):
    """A folder of presets from someone else, and beside it a finished run of this learner's."""
    presets, here = tmp_path / "presets", tmp_path / "here"
    (presets / "experiment").mkdir(parents=True)
    (presets / "hydra" / "callbacks").mkdir(parents=True)
    run = here / "other_run"
    run.mkdir(parents=True)
    (run / "summary.json").write_text('{"status": "completed"}\n')
    (run / "metrics.csv").write_text("step,loss\n0,1.0\n")
    marker = tmp_path / "PWNED"
    for name, (body, _key) in MEMBERS.items():
        (presets / "experiment" / f"{name}.yaml").write_text(hostile(name, body, marker, run / "metrics.csv"))
    (presets / "hydra" / "callbacks" / "evil.yaml").write_text(
        f"evil:\n  _target_: builtins.open\n  file: {marker}\n  mode: w\n")
    (presets / "experiment" / "pkg_hydra.yaml").write_text(
        f"# @package hydra\ncallbacks:\n  evil:\n    _target_: builtins.open\n    file: {marker}\n    mode: w\n")
    (presets / "experiment" / "fine.yaml").write_text(  # what attnlab's own presets set
        "# @package _global_\nseed: 3\nhydra:\n  run:\n    dir: runs/${now:%H-%M-%S.%f}\n  job:\n    config:\n"
        "      override_dirname:\n        exclude_keys: [experiment]\n")
    (presets / "model").mkdir()
    (presets / "model" / "sweeps_evil.yaml").write_text(  # a sweep whose jobs choose a hostile preset
        "# @package _global_\nhydra:\n  mode: MULTIRUN\n  sweeper:\n    params:\n      experiment: fine,callback\n")
    return presets, here, marker, run


def untouched(here: Path, marker: Path, run: Path) -> bool:
    return (not marker.exists() and (run / "metrics.csv").read_text() == "step,loss\n0,1.0\n"
            and sorted(p.name for p in here.iterdir()) == ["other_run"])


@pytest.mark.parametrize("name", [*MEMBERS, "pkg_hydra"])
def test_a_preset_that_sets_a_hydra_setting_is_one_line_and_runs_nothing(classroom, name):
    presets, here, marker, run = classroom
    done = run_here("--config-dir", str(presets), f"experiment={name}", *QUIET, cwd=here)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    key = MEMBERS.get(name, ("", "hydra.callbacks.evil"))[1]
    assert line.startswith(f"error: {key}") and f"(from --config-dir {presets})" in line, line
    assert "a config folder is data, never code" in line
    assert untouched(here, marker, run)


@pytest.mark.parametrize("args", [
    ("-m", "experiment=fine,callback"),  # a sweep over presets: each job's config is checked
    ("model=sweeps_evil",),  # a preset that sweeps over presets
    ("--multirun", "experiment=fine,job_log", "seed=1,2"),
])
def test_every_config_of_a_sweep_is_checked_before_the_first_job(classroom, args):
    presets, here, marker, run = classroom
    done = run_here(f"--config-dir={presets}", *args, *QUIET, cwd=here)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.splitlines()) == 1 and "a config folder is data" in done.stderr
    assert untouched(here, marker, run)


def test_hydra_searchpath_is_a_config_folder_too(classroom):
    presets, here, marker, run = classroom
    done = run_here(f"hydra.searchpath=[file://{presets}]", "experiment=callback", *QUIET, cwd=here)
    assert done.returncode == 2 and "error: hydra.callbacks.evil" in done.stderr
    assert untouched(here, marker, run)


def test_a_preset_setting_what_attnlabs_presets_set_runs(classroom):
    presets, here, marker, run = classroom
    done = run_here("--config-dir", str(presets), "experiment=fine", *QUIET, cwd=here)
    assert done.returncode == 0, done.stderr
    [folder] = (here / "runs").iterdir()
    assert (folder / "summary.json").is_file() and not marker.exists()


def test_compare_against_a_hostile_preset_runs_nothing(classroom, report_sweep, capsys):
    from attnlab.commands import compare

    presets, here, marker, run = classroom
    for name in ("callback", "job_log", "pull_callbacks"):
        code = compare.main([str(report_sweep), "--against", str(presets / "experiment" / f"{name}.yaml")])
        capsys.readouterr()
        assert code in (0, 2) and untouched(here, marker, run)


def test_a_whole_config_folder_given_as_config_path(tmp_path):
    import shutil

    from attnlab.commands.cli import HYDRA_WRITES_NOTHING
    from attnlab.commands.config_folder import refusal
    from attnlab.commands.hydra_config import register_configs

    register_configs()
    copy = tmp_path / "conf"
    shutil.copytree(Path(__file__).resolve().parent.parent / "conf", copy)
    args = ["--config-path", str(copy), *HYDRA_WRITES_NOTHING, "seed=1"]
    assert refusal(args) is None  # attnlab's own config, copied: the same Hydra settings
    text = (copy / "config.yaml").read_text()
    (copy / "config.yaml").write_text(text.replace("  callbacks:\n", "  callbacks:\n    evil:\n      _target_: os.system\n"))
    assert refusal(args).startswith(f'error: hydra.callbacks.evil={{"_target_": "os.system"}} (from --config-path {copy})')
    (copy / "config.yaml").write_text(text.replace("  job:\n", "  job:\n    env_set:\n      LD_PRELOAD: /tmp/x.so\n"))
    assert refusal(args).startswith("error: hydra.job.env_set.LD_PRELOAD='/tmp/x.so'")
    (copy / "config.yaml").write_text("seed: 3\n")  # a config that says nothing of Hydra: Hydra's own settings
    assert refusal(args) is None
