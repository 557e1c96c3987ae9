"""`attnlab --help` (conf/hydra/help/attnlab.yaml) stays true: every schema key with its default
and allowed values, every config group option, every experiment preset, every other command;
nothing of the internal `schema/*` groups. Walks the schema and the config folders, so a key,
option or preset added without its help line fails here."""
from __future__ import annotations

import dataclasses
import enum
import re
from importlib import metadata, resources

import pytest
from omegaconf import MISSING

from attnlab.core.config import OPTIMIZERS, Config

from conftest import ROOT, run_here


@pytest.fixture(scope="module")
def help_text() -> str:
    proc = run_here("--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    return proc.stdout


def section(text: str, title: str) -> str:
    """The lines under ``== title ...==`` up to the next ``==`` heading."""
    match = re.search(rf"^== {re.escape(title)}.*?==\n(.*?)(?=^== |\Z)", text, re.S | re.M)
    assert match, f"no section {title!r} in --help"
    return match.group(1)


def schema_keys(node: type, prefix: str = "") -> dict[str, dataclasses.Field]:
    """Every leaf key of a schema dataclass, dotted, with its field."""
    keys = {}
    for f in dataclasses.fields(node):
        if dataclasses.is_dataclass(f.type) or (f.default_factory is not dataclasses.MISSING
                                                 and dataclasses.is_dataclass(f.default_factory())):
            keys.update(schema_keys(f.default_factory().__class__, f"{prefix}{f.name}."))
        elif f.name != "optimizer":
            keys[f"{prefix}{f.name}"] = f
    return keys


def shown(value) -> str:
    """A default as the help writes it (YAML words for None and booleans)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


def default_of(f: dataclasses.Field):
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def key_lines(text: str) -> dict[str, str]:
    """``{key: its line (and continuation lines)}`` from the Keys section."""
    lines: dict[str, str] = {}
    last = None
    for line in section(text, "Keys").splitlines():
        match = re.match(r"^  (\S+)\s{2,}(.*)$", line)
        if match:
            last = match.group(1)
            lines[last] = match.group(2)
        elif line.startswith(" " * 20) and last:  # a continuation line
            lines[last] += " " + line.strip()
    return lines


def test_every_schema_key_with_default_and_allowed_values(help_text):
    lines = key_lines(help_text)
    keys = schema_keys(Config)
    assert len(keys) == 45  # the walk found the nested keys (task ... analysis.top_k, name, notes, lang)
    for key, f in keys.items():
        assert key in lines, f"{key} missing from attnlab --help"
        line = lines[key]
        default = default_of(f)
        if isinstance(default, str) and default.startswith("${"):  # d_v: ${model.d_model}
            assert default[2:-1] in line, key
        else:
            assert shown(default) in line, (key, shown(default), line)
        if isinstance(default, enum.Enum):  # allowed values: every member
            assert all(m.value in line for m in type(default)), (key, line)
        elif isinstance(default, bool):
            assert "true, false" in line, key
        assert len(re.split(r"\s{2,}", line.strip())) >= 2, f"{key}: no allowed values in {line!r}"
    # the optimizer keys of every shipped optimizer, each optimizer's default shown
    for name, node in OPTIMIZERS.items():
        for f in dataclasses.fields(node):
            key = f"optimizer.{f.name}"
            assert key in lines, f"{key} ({name}) missing from attnlab --help"
            if f.name == "_target_":
                assert f.default.rpartition(".")[2] in lines[key], (name, lines[key])
            elif f.default is not MISSING:
                assert shown(default_of(f)) in lines[key], (key, name, lines[key])
    assert set(lines) == set(keys) | {f"optimizer.{f.name}" for n in OPTIMIZERS.values()
                                      for f in dataclasses.fields(n)} | {"key"}  # nothing stale


def config_groups() -> dict[str, list[str]]:
    """``{group: [options]}`` from the shipped config folder (conf/), as Hydra sees it."""
    conf = resources.files("attnlab.conf")
    groups = {}
    for folder in conf.iterdir():
        if folder.is_dir() and folder.name not in ("hydra", "__pycache__"):
            groups[folder.name] = sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))
    return groups


def test_every_group_option_and_preset(help_text):
    groups = config_groups()
    assert set(groups) == {"model", "optimizer", "train", "logging", "experiment"}
    text = section(help_text, "Config groups")
    listed: dict[str, set[str]] = {}
    group = None
    for line in text.splitlines():
        match = re.match(r"^  (\S+): (.*)$", line)
        if match:
            group, line = match.groups()
        options = re.split(r"\s{2,}", line.strip())[0]  # the option cell, before the description
        listed.setdefault(group, set()).update(o.strip() for o in options.split(","))
    for group, options in groups.items():
        assert group in listed, f"group {group} missing from attnlab --help"
        if group != "experiment":
            assert set(options) <= listed[group], (group, options, listed[group])
    presets = {m.group(1) for m in re.finditer(r"^  (\w+)\s{2,}\S", section(help_text, "Presets"), re.M)}
    assert presets == set(groups["experiment"])
    assert sorted(p.stem for p in (ROOT / "experiments").glob("*.yaml")) == groups["experiment"]
    for launcher in ("basic", "joblib", "submitit_local", "submitit_slurm"):
        assert launcher in listed["hydra/launcher"]


def test_no_internal_schema_groups_and_every_command(help_text):
    assert "schema/" not in help_text
    assert "schema" not in section(help_text, "Config groups")
    commands = section(help_text, "Other commands")
    scripts = {ep.name for ep in metadata.distribution("attnlab").entry_points if ep.group == "console_scripts"}
    assert "attnlab-compare" in scripts and "attnlab-reproduce" in scripts
    for script in scripts - {"attnlab"}:
        assert re.search(rf"^  {script}\b", commands, re.M), f"{script} missing from attnlab --help"
    assert "attnlab-report" in commands
    assert "README.md" in help_text and "--hydra-help" in help_text
    assert "$" not in help_text.replace("${model.d_model}", "")  # every placeholder substituted


def test_help_shows_the_config_with_the_overrides():
    proc = run_here("model.d_model=16", "optimizer=sgd", "--help")
    assert proc.returncode == 0, proc.stderr
    config = section(proc.stdout, "Config (the values")
    assert "  d_model: 16\n" in config
    assert "  _target_: torch.optim.SGD\n" in config
    assert "  momentum: 0.0\n" in config


def test_options_may_come_between_overrides():
    proc = run_here("model.d_model=16", "--cfg", "job", "optimizer=sgd")
    assert proc.returncode == 0, proc.stderr
    assert "  d_model: 16\n" in proc.stdout and "_target_: torch.optim.SGD" in proc.stdout


def test_hydra_help_still_works():
    proc = run_here("--hydra-help")
    assert proc.returncode == 0, proc.stderr
    assert "== Flags ==" in proc.stdout
    assert "--multirun,-m" in proc.stdout
    assert re.search(r"^hydra/help: .*\battnlab\b", proc.stdout, re.M)  # our template is a hydra/help option
