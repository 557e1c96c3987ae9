"""A config folder someone else made (``attnlab --config-dir DIR``, ``--config-path DIR``,
``hydra.searchpath=[...]``: a class's presets) is data, never code. Before Hydra composes anything for
the command (its own logging, callbacks, launcher and sweeper are set up from the composed config),
:func:`refusal` composes the same configs with Hydra's compose API (the same search path and
overrides; for a sweep, one config per combination of the config groups it sweeps) and compares
their ``hydra`` section with the one attnlab's own config and the typed overrides give. A folder may
set only :data:`ALLOWED` (what attnlab's own presets set); any other difference (``hydra.callbacks``,
a ``job_logging`` / ``hydra_logging`` handler, a launcher or sweeper ``_target_``, ``hydra.job.env_set``,
a ``defaults`` entry pulling ``hydra/callbacks``, a run or sweep dir outside the folder the command
runs in, ...) is one line, exit 2, before anything is instantiated, opened or written.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import re
from pathlib import Path
from typing import Any, Iterator

from omegaconf import DictConfig, OmegaConf

from attnlab.commands.argv import FLAGS, FLAGS_WITH_VALUE
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


def folder_options(args: list[str]) -> argparse.Namespace:
    """Hydra's options in ``args`` that choose where configs come from, ``multirun`` and the overrides
    (as Hydra's argparse reads them: ``--config-dir DIR``, ``--config-dir=DIR``, ``--config-d DIR``)."""
    dest = {"-cp": "config_path", "--config-path": "config_path", "-cn": "config_name", "--config-name": "config_name",
            "-cd": "config_dir", "--config-dir": "config_dir"}
    out = argparse.Namespace(config_path=None, config_name=None, config_dir=None, multirun=False, overrides=[])
    given = iter(args)
    for arg in given:
        if not arg.startswith("-") or arg == "-":
            out.overrides.append(arg)
            continue
        name, eq, value = arg.partition("=")
        known = FLAGS | FLAGS_WITH_VALUE
        full = name if name in known else next(iter(sorted(f for f in known if name.startswith("--") and len(name) > 2
                                                           and f.startswith(name))), name)
        if full in FLAGS_WITH_VALUE and not eq:
            value = next(given, None)
        if full in dest:
            setattr(out, dest[full], value)
        out.multirun |= full in ("-m", "--multirun")
    return out


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def from_a_folder(argv: list[str]) -> bool:
    """Whether ``argv`` (the command's arguments) takes configs from a folder other than attnlab's."""
    args = folder_options(argv)
    return bool(args.config_dir or args.config_path or any(_key(o) == "hydra.searchpath" for o in args.overrides))


def _initialize(config_path: str | None):
    """Hydra's compose API on the search path ``hydra.main`` makes from ``--config-path``."""
    from hydra import initialize_config_dir, initialize_config_module

    from attnlab.commands.hydra_config import VERSION_BASE

    if config_path is None:
        return initialize_config_module("attnlab.conf", **VERSION_BASE)
    if config_path.startswith("pkg://"):
        return initialize_config_module(config_path[len("pkg://"):], **VERSION_BASE)
    path = config_path.removeprefix("file://")
    if not os.path.isabs(path):  # Hydra reads a relative one as a package beside attnlab.commands.cli
        return initialize_config_module("attnlab.commands." + path.strip("/").replace("/", "."), **VERSION_BASE)
    return initialize_config_dir(path, **VERSION_BASE)


def _compose(config_path: str | None, config_name: str | None, overrides: list[str]) -> DictConfig:
    from hydra import compose

    with _initialize(config_path):
        return compose(config_name or "config", overrides=overrides, return_hydra_config=True)


def combinations(overrides: list[str], params: Any) -> list[list[str]]:
    """One list of ``key=value`` choices per key, as Hydra's basic sweeper makes them from ``params``
    (``hydra.sweeper.params``) and then ``overrides``: every value of a swept config group (it
    chooses files), only the first of a swept config key (the same files for each)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    extra = [f"{k}={v}" for k, v in (params or {}).items()]
    final: dict[str, list[str]] = {}
    for o in OverridesParser.create().parse_overrides([*extra, *overrides]):
        key = o.get_key_element()
        if not o.is_sweep_override():
            final[key] = [f"{key}={o.get_value_element_as_str()}"]
            continue
        values = list(itertools.islice(o.sweep_string_iterator(), MAX_COMPOSED + 1)) if o.is_discrete_sweep() else []
        group = o.key_or_group not in schema_keys() and "." not in o.key_or_group.removeprefix("hydra/")
        final[key] = [f"{key}={v}" for v in (values if group else values[:1])]
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
    folder = Path(static)
    return not any((p / "summary.json").exists() for p in [folder, *folder.parents])


def problem(actual: DictConfig, bases: list[dict[str, Any]]) -> tuple[str, Any] | None:
    """The first ``(key, value)`` of ``actual``'s hydra section a config folder may not set, or None:
    one that differs from its value in each of ``bases`` (attnlab's hydra section, Hydra's own)."""
    hydra = OmegaConf.to_container(actual.hydra, resolve=False)
    other = [dict(differences(hydra, base)) for base in bases[1:]]
    for key, value in differences(hydra, bases[0]):
        if all(key not in found and not any(k.startswith(key + ".") for k in found) for found in other):
            continue  # as the other base has it
        if key.startswith(tuple(f"{a}." for a in ALLOWED)) or key in ALLOWED:
            continue
        if key in FOLDERS and inside_here(value):
            continue
        return key, value
    return None


def refusal(argv: list[str]) -> str | None:
    """One line when a config folder in ``argv`` (the arguments Hydra gets) sets a Hydra setting it may
    not (module docstring), else None. Hydra's own errors composing the configs are raised as they are."""
    if not from_a_folder(argv):
        return None
    args = folder_options(argv)
    typed_hydra = [o for o in args.overrides if _key(o).startswith(("hydra.", "hydra/")) and "," not in o
                   and _key(o) != "hydra.searchpath"]
    from hydra import compose

    with _initialize(None):  # attnlab's hydra settings, and Hydra's own (a folder's config that says nothing)
        bases = [OmegaConf.to_container(compose(name, overrides=typed_hydra, return_hydra_config=True).hydra,
                                        resolve=False) for name in ("config", None)]
    where = " ".join(f"{flag} {value}" for flag, value in (("--config-dir", args.config_dir),
                                                          ("--config-path", args.config_path)) if value)
    searchpath = [o for o in args.overrides if _key(o) == "hydra.searchpath"]
    if args.config_dir:  # where Hydra puts --config-dir on the search path: after the main config, before the schema
        paths = f"file://{os.path.abspath(args.config_dir)}"
        if not os.path.isdir(args.config_dir):
            return None  # Hydra's own error names it
        searchpath = [f"hydra.searchpath=[{paths!r}]"] if not searchpath else [
            searchpath[-1].replace("=[", f"=[{paths!r},", 1)]
    overrides = [o for o in args.overrides if _key(o) != "hydra.searchpath"] + searchpath
    first = _compose(args.config_path, args.config_name, [c[0] for c in combinations(overrides, None)])
    params = first.hydra.sweeper.params
    choices = combinations(overrides, OmegaConf.to_container(params, resolve=False) if params else None)
    for n, combination in enumerate(itertools.product(*choices)):
        if n >= MAX_COMPOSED:
            return (f"error: {printable(where or 'hydra.searchpath', 300)}: a sweep over more than {MAX_COMPOSED} "
                    "combinations of config groups from a config folder; sweep fewer presets at a time")
        cfg = first if n == 0 and not params else _compose(args.config_path, args.config_name, list(combination))
        if (found := problem(cfg, bases)) is not None:
            key, value = found
            shown = printable(json.dumps(value, ensure_ascii=False, default=str) if isinstance(value, (dict, list))
                              else repr(value), 160)
            return _("error: {key}={value} (from {folder}): refused: a config folder is data, never code; it may set "
                     "only {allowed} and hydra.run.dir / hydra.sweep.dir inside this folder; type other Hydra "
                     "settings on the command line").format(
                key=key, value=shown, folder=printable(where or "hydra.searchpath", 300),
                allowed=", ".join(ALLOWED))
    return None
