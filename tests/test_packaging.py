"""The install ships every config folder: each folder under conf/ that holds YAML is a package in
pyproject.toml's ``packages`` with its ``*.yaml`` as package data. A folder left out is what made
setuptools print ~40 lines of "Package 'attnlab.conf.X' is absent from the `packages`
configuration" per folder (and a wheel without those configs)."""
from __future__ import annotations

import pytest

from conftest import ROOT

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11


def test_every_config_folder_is_a_listed_package_with_its_yaml():
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    assert setup["package-dir"]["attnlab.conf"] == "conf"
    conf = ROOT / "conf"
    folders = {d for d in conf.rglob("*") if d.is_dir() and "__pycache__" not in d.parts}
    folders |= {d for d in (conf / "experiment").iterdir() if d.is_dir()}  # behind the symlink, if any
    with_yaml = {d for d in folders | {conf} if any(d.glob("*.yaml"))}
    packages = {"attnlab.conf" + "".join(f".{p}" for p in d.relative_to(conf).parts) for d in with_yaml}
    assert {"attnlab.conf", "attnlab.conf.experiment", "attnlab.conf.hydra.help"} <= packages
    for package in packages:
        assert package in setup["packages"], f"{package} missing from pyproject.toml packages"
        assert "*.yaml" in setup["package-data"].get(package, []), f"{package} missing from package-data"
    # a parent folder that holds no YAML itself (conf/hydra) is still a package on the way down
    for package in packages:
        parts = package.split(".")
        for i in range(2, len(parts)):
            assert ".".join(parts[:i]) in setup["packages"], ".".join(parts[:i])


def test_every_python_package_of_attnlab_is_listed():
    """A sub-package (attnlab/core/) missing from ``packages`` would be missing from the wheel."""
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    found = {".".join(d.relative_to(ROOT).parts) for d in (ROOT / "attnlab").rglob("*")
             if d.is_dir() and (d / "__init__.py").is_file()}
    assert {"attnlab.core", "attnlab.outputs", "attnlab.saved", "attnlab.commands"} <= found
    assert found <= set(setup["packages"])
