"""A config folder someone else made (``attnlab --config-dir DIR``, ``--config-path DIR``,
``hydra.searchpath=[...]``: a class's presets) is data, never code. Before Hydra composes anything for
the command (its logging, callbacks, launcher and sweeper come from the composed config), :func:`refusal`
composes the same configs with Hydra's compose API (for a sweep, one per combination of the config
groups it sweeps) and compares their ``hydra`` section with attnlab's own and Hydra's own. A folder may
set only :data:`ALLOWED` and output folders inside this one; any other difference (``hydra.callbacks``,
a log handler, a launcher or sweeper ``_target_``, ``hydra.job.env_set``, ...) is one line, exit 2,
before anything is instantiated, opened or written."""
from __future__ import annotations

import itertools
import json
import os
import re
from pathlib import Path
from typing import Any, Iterable, Iterator

from hydra import compose, initialize_config_dir, initialize_config_module
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from attnlab.commands.argv import HydraOptions
from attnlab.commands.hydra_config import VERSION_BASE
from attnlab.core.config import schema_keys
from attnlab.core.files import printable
from attnlab.core.i18n import _

# hydra keys a config folder may set (prefixes), as attnlab's presets do (conf/experiment/seeds.yaml)
ALLOWED = ("hydra.mode", "hydra.sweeper.params", "hydra.job.config.override_dirname")
# the output folders, when they stay below the folder the command runs in (:func:`inside_here`)
FOLDERS = ("hydra.run.dir", "hydra.sweep.dir", "hydra.sweep.subdir")
# what Hydra fills in itself, or the search path the command line chose
NOT_COMPARED = ("hydra.runtime", "hydra.overrides", "hydra.job.config_name", "hydra.searchpath", "hydra.job.name",
                "hydra.job.override_dirname", "hydra.job.id", "hydra.job.num")
# the interpolations an output folder may hold (they name a time, a job or the run's name)
FOLDER_INTERPOLATIONS = ("now:", "attnlab.job_dir:", "hydra.job.num", "hydra.job.override_dirname", "name")
_INNERMOST = re.compile(r"\$\{([^${}]*)\}")
MAX_COMPOSED = 256  # configs composed for one sweep at most


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def _initialize(config_path: str | None):
    """Hydra's compose API on the search path ``hydra.main`` makes from ``--config-path``."""
    path = (config_path or "pkg://attnlab.conf").removeprefix("file://")
    if path.startswith("pkg://"):
        return initialize_config_module(path[len("pkg://"):], **VERSION_BASE)
    if not os.path.isabs(path):  # Hydra reads a relative one as a package beside attnlab.commands.cli
        return initialize_config_module("attnlab.commands." + path.strip("/").replace("/", "."), **VERSION_BASE)
    return initialize_config_dir(path, **VERSION_BASE)


def combinations(overrides: Iterable[str], params: Any = None, files_only: bool = False) -> list[list[str]]:
    """One list of ``key=value`` choices per key, as Hydra's basic sweeper makes them from ``params``
    (``hydra.sweeper.params``) and then ``overrides`` (a later key replaces an earlier one); their product is
    the sweep's jobs. ``files_only`` (:func:`refusal`): every value of a swept config group (it chooses
    files), only the first of a swept config key (the same files for each)."""
    final: dict[str, list[str]] = {}
    for o in OverridesParser.create().parse_overrides([*(f"{k}={v}" for k, v in (params or {}).items()), *overrides]):
        key = o.get_key_element()
        if not o.is_sweep_override():
            values = [o.get_value_element_as_str()]
        elif not files_only:
            values = list(o.sweep_string_iterator())
        else:
            group = o.key_or_group not in schema_keys() and "." not in o.key_or_group.removeprefix("hydra/")
            values = list(itertools.islice(o.sweep_string_iterator(), MAX_COMPOSED + 1 if group else 1)
                          ) if o.is_discrete_sweep() else []
        final[key] = [f"{key}={v}" for v in values]
    return [choices for choices in final.values() if choices]


def differences(actual: Any, base: Any, key: str = "hydra") -> Iterator[tuple[str, Any]]:
    """``(key, value)`` for each key of ``actual`` (plain data) that differs from ``base``."""
    if key in NOT_COMPARED:
        return
    if isinstance(actual, dict) and isinstance(base, dict):
        for k in [*actual, *(k for k in base if k not in actual)]:
            yield from differences(actual.get(k), base.get(k), f"{key}.{k}")
    elif actual != base:
        yield key, actual


def inside_here(value: Any) -> bool:
    """Whether an output folder setting stays below the folder the command runs in and outside every run
    there: a relative path, no ``..``, ``~`` or drive, no interpolation but :data:`FOLDER_INTERPOLATIONS`
    (a time, a job, the name), and no folder on its way that holds a run (a ``summary.json``)."""
    if not isinstance(value, str):
        return False
    static = value.split("${", 1)[0]
    while (inner := _INNERMOST.search(value)) is not None:
        if not inner[1].startswith(FOLDER_INTERPOLATIONS):
            return False
        value = value[:inner.start()] + "x" + value[inner.end():]
    parts = re.split(r"[/\\]", value)
    if "${" in value or os.path.isabs(value) or value.startswith(("~", "/", "\\")) or ".." in parts or ":" in value:
        return False
    return not any((p / "summary.json").exists() for p in [Path(static), *Path(static).parents])


def refusal(argv: list[str]) -> str | None:
    """One line when a config folder in ``argv`` (the arguments Hydra gets) sets a Hydra setting it may
    not (module docstring), else None. Hydra's own errors composing the configs are raised as they are."""
    args = HydraOptions().parse_intermixed_args(argv)
    searchpath = [o for o in args.overrides if _key(o) == "hydra.searchpath"]
    if not (args.config_dir or args.config_path or searchpath):
        return None
    typed_hydra = [o for o in args.overrides if _key(o).startswith(("hydra.", "hydra/")) and "," not in o
                   and _key(o) != "hydra.searchpath"]
    with _initialize(None):  # attnlab's hydra settings, and Hydra's own (a folder's config that says nothing)
        ours, hydras = [OmegaConf.to_container(compose(name, overrides=typed_hydra, return_hydra_config=True).hydra,
                                               resolve=False) for name in ("config", None)]
    where = " ".join(f"{flag} {value}" for flag, value in (("--config-dir", args.config_dir),
                                                          ("--config-path", args.config_path)) if value)
    if args.config_dir:  # where Hydra puts --config-dir on the search path: after the main config, before the schema
        paths = f"file://{os.path.abspath(args.config_dir)}"
        if not os.path.isdir(args.config_dir):
            return None  # Hydra's own error names it
        searchpath = [f"hydra.searchpath=[{paths!r}]"] if not searchpath else [
            searchpath[-1].replace("=[", f"=[{paths!r},", 1)]
    overrides = [o for o in args.overrides if _key(o) != "hydra.searchpath"] + searchpath

    def composed(overrides: list[str]) -> Any:
        with _initialize(args.config_path):
            return compose(args.config_name or "config", overrides=overrides, return_hydra_config=True)

    first = composed([c[0] for c in combinations(overrides, files_only=True)])
    params = first.hydra.sweeper.params
    choices = combinations(overrides, OmegaConf.to_container(params, resolve=False) if params else None, True)
    for n, combination in enumerate(itertools.product(*choices)):
        if n >= MAX_COMPOSED:
            return _("error: {where}: a sweep over more than {most} combinations of config groups from a config "
                     "folder; sweep fewer presets at a time").format(
                where=printable(where or "hydra.searchpath", 300), most=MAX_COMPOSED)
        hydra = OmegaConf.to_container((first if n == 0 and not params else composed(list(combination))).hydra,
                                       resolve=False)
        theirs = dict(differences(hydra, hydras))  # a folder's difference is one from Hydra's own settings too
        for key, value in differences(hydra, ours):
            allowed = (key + ".").startswith(tuple(a + "." for a in ALLOWED)) or key in FOLDERS and inside_here(value)
            if allowed or not any(k == key or k.startswith(key + ".") for k in theirs):
                continue
            shown = printable(json.dumps(value, ensure_ascii=False, default=str) if isinstance(value, (dict, list))
                              else repr(value), 160)
            return _("error: {key}={value} (from {folder}): refused: a config folder is data, never code; it may set "
                     "only {allowed} and hydra.run.dir / hydra.sweep.dir inside this folder; type other Hydra "
                     "settings on the command line").format(
                key=key, value=shown, folder=printable(where or "hydra.searchpath", 300), allowed=", ".join(ALLOWED))
    return None
