"""The Python API for notebooks: compose a config like the command line does, run it in-process.

>>> from attnlab.commands.api import compose, train
>>> result = train(compose("model.d_model=16", "optimizer.lr=0.01"))
>>> result.losses.shape, [s.step for s in result.snapshots]  # nothing written unless sinks are passed
"""
from __future__ import annotations

import contextlib

from omegaconf import DictConfig, OmegaConf

from attnlab.commands.argv import prepare
from attnlab.commands.cli import error_line, refusal
from attnlab.commands.hydra_config import register_configs
from attnlab.core import training
from attnlab.core import walkthrough as core_walkthrough
from attnlab.core.config import plain
from attnlab.core.errors import AttnlabError
from attnlab.core.i18n import LANGUAGES, set_language
from attnlab.core.records import RunResult, Snapshot

__all__ = ["compose", "train", "walkthrough", "RunResult", "Snapshot"]


def compose(*overrides: str, config_name: str = "config") -> DictConfig:
    """The config that ``attnlab OVERRIDES`` would run (free text as typed: ``compose("sentence=你好")``).
    Raises AttnlabError with the command's one line (``model.d_mdl=3: no such config key ...``)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    if (refused := refusal(list(overrides))) is not None:
        raise AttnlabError(refused.removeprefix("error: "))
    register_configs()
    inside = GlobalHydra.instance().is_initialized()  # e.g. inside a Hydra app or another compose
    try:
        with contextlib.nullcontext() if inside else initialize_config_module("attnlab.conf", version_base="1.3"):
            return hydra_compose(config_name, overrides=prepare(overrides))
    except Exception as err:
        raise AttnlabError(error_line(err, list(overrides)).removeprefix("error: ")) from None


def train(cfg: DictConfig, *args, **kwargs) -> RunResult:
    """:func:`attnlab.core.training.train` (same arguments) speaking ``cfg.lang``, the caller's torch
    thread count kept."""
    import torch

    caller = torch.get_num_threads()
    _speak(cfg)
    try:
        return training.train(cfg, *args, **kwargs)
    finally:
        torch.set_num_threads(caller)


def walkthrough(cfg: DictConfig, *args, **kwargs) -> dict:
    """:func:`attnlab.core.walkthrough.walkthrough` (same arguments) speaking ``cfg.lang``."""
    _speak(cfg)
    return core_walkthrough.walkthrough(cfg, *args, **kwargs)


def _speak(cfg: DictConfig) -> None:
    """``_()`` in ``cfg``'s language from now on (a ``lang`` it does not have: left as it is)."""
    lang = plain(OmegaConf.select(cfg, "lang", default=None))
    if lang in LANGUAGES:
        set_language(lang)
