"""Hydra's side of the config: the schema (:mod:`attnlab.core.config`) in Hydra's ConfigStore and the resolvers
``attnlab.job_dir`` (:func:`attnlab.commands.sweep.job_dirname`), ``attnlab.per_head`` and ``attnlab.data``;
registered on import, so every job process has them (a launcher's worker imports ``attnlab.commands.cli``)."""
from __future__ import annotations

import inspect
from importlib import resources
from typing import Any

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from attnlab.commands.sweep import job_dirname
from attnlab.core.config import OPTIMIZERS, Config
from attnlab.core.i18n import _


def per_head(total: Any, n_heads: Any) -> int:
    """``TOTAL // N_HEADS``, at least 1 (d_k 4 → 4, 2, 1 for 1, 2, 4 heads); ValueError if not positive."""
    total, n_heads = int(total), int(n_heads)
    if total < 1 or n_heads < 1:
        raise ValueError(f"attnlab.per_head needs positive integers, got {total}, {n_heads}")
    return max(1, total // n_heads)


def data_file(name: Any) -> str:
    """The path of a text attnlab ships in ``attnlab/data`` (``${attnlab.data:weather_zh.txt}``); ValueError if none."""
    path = resources.files("attnlab.data") / str(name)
    if not path.is_file():
        raise ValueError(_("attnlab ships no data file {name!r}").format(name=name))
    return str(path)


# Hydra's 1.3 defaults: Hydra 1.3 warns when version_base is not given, 1.4 when it is
VERSION_BASE = {"version_base": "1.3"} if tuple(map(int, hydra.__version__.split(".")[:2])) < (1, 4) else {}


def register_resolver(name: str, function: Any) -> None:
    """OmegaConf 2.4's ``register_resolver`` (it has ``replace=``; its ``register_new_resolver`` warns above
    a learner's error line), else ``register_new_resolver`` (2.3's ``register_resolver`` is the legacy one)."""
    new = "replace" in inspect.signature(OmegaConf.register_resolver).parameters
    (OmegaConf.register_resolver if new else OmegaConf.register_new_resolver)(name, function)


def register_configs() -> None:
    """Store the schema (again at every call: ``lang``'s default is the locale's then; ``replace=True``
    where Hydra takes it, 1.4 warns without it) and register the resolvers."""
    cs = ConfigStore.instance()
    replace = {"replace": True} if "replace" in inspect.signature(cs.store).parameters else {}
    cs.store(name="base_config", node=Config, **replace)
    for name, node in OPTIMIZERS.items():
        cs.store(group="schema/optimizer", name=name, node=node, **replace)
    for name, function in (("attnlab.job_dir", job_dirname), ("attnlab.per_head", per_head),
                           ("attnlab.data", data_file)):
        if not OmegaConf.has_resolver(name):
            register_resolver(name, function)


register_configs()
