"""attnlab's sweeper (``hydra/sweeper: attnlab``, set in attnlab's ``conf/config.yaml``): Hydra's
basic sweeper, composing each job's config once instead of twice.

Hydra's ``BasicSweeper`` composes every job's config to check the batch before launching it
(``validate_batch_is_legal``: a bad override fails the sweep before any job runs), then the
launcher composes each one again (~70 ms per job, the largest per-job cost of a ``logging=off``
sweep). This sweeper hands the launcher a config loader that keeps each checked composition
and gives it to the launcher once (:class:`ComposedOnce`): the same config, the same early
check, one composition. Launchers in other processes (joblib, submitit) compose as before (the
kept compositions are not pickled). A Hydra plugin has to live in the ``hydra_plugins``
package for Hydra to load it; :func:`register_sweeper` (called by
``attnlab.config.register_configs``) registers it explicitly too, because Hydra's scan of that
package does not see modules of an editable install.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional

from hydra.core.config_store import ConfigStore
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext


@dataclass
class AttnlabSweeperConf:
    _target_: str = "hydra_plugins.attnlab_sweeper.AttnlabSweeper"
    # jobs composed, checked and kept per batch: memory and the wait before the first job stay
    # bounded however many jobs a sweep has (a bad override in a later batch stops the sweep there)
    max_batch_size: Optional[int] = 100
    params: Optional[Any] = None


ConfigStore.instance().store(group="hydra/sweeper", name="attnlab", node=AttnlabSweeperConf, provider="attnlab")


def register_sweeper() -> None:
    """Make ``hydra/sweeper: attnlab`` usable: its config node (stored when this module is
    imported) and the plugin class in Hydra's registry (``Plugins.register``); idempotent."""
    from hydra.core.plugins import Plugins

    Plugins.instance().register(AttnlabSweeper)


class ComposedOnce:
    """A config loader that keeps the sweep configs it composes and returns each kept one once
    (then forgets it); everything else is the wrapped loader's."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader
        self._kept: dict[tuple[int, tuple[str, ...]], Any] = {}

    def load_sweep_config(self, master_config: Any, sweep_overrides: List[str]) -> Any:
        from attnlab import interrupts

        interrupts.check()  # Ctrl-C / SIGTERM while a large batch is composed: stop now, not after it
        key = (id(master_config), tuple(sweep_overrides))
        if key in self._kept:
            return self._kept.pop(key)
        config = self._loader.load_sweep_config(master_config, list(sweep_overrides))
        self._kept[key] = config
        return config

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)

    def __getstate__(self) -> dict:  # a launcher in another process composes for itself
        return {"_loader": self._loader, "_kept": {}}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)


class AttnlabSweeper(Sweeper):
    """Hydra's ``BasicSweeper`` (same options, same order of jobs and batches) whose launcher
    reuses the configs composed to check each batch. It wraps a ``BasicSweeper`` made when
    Hydra instantiates this one (Hydra's plugin scan re-executes its core plugin modules, so a
    subclass made at import could hold a stale class)."""

    def __init__(self, max_batch_size: Optional[int] = 100, params: Optional[Any] = None) -> None:
        from hydra._internal.core_plugins import basic_sweeper

        self.basic = basic_sweeper.BasicSweeper(max_batch_size=max_batch_size, params=params)

    def setup(self, *, hydra_context: HydraContext, task_function: Any, config: Any) -> None:
        once = HydraContext(config_loader=ComposedOnce(hydra_context.config_loader),
                            callbacks=hydra_context.callbacks)
        self.basic.setup(hydra_context=once, task_function=task_function, config=config)
        self.config = config

    def sweep(self, arguments: List[str]) -> Any:
        _start_render_child(self.config)
        return self.basic.sweep(arguments)


def _start_render_child(config: Any) -> None:
    """When the jobs run in this process (Hydra's basic launcher) and draw figures, start the
    render children (attnlab.render_process: one per core, the jobs' drawings shared between
    them) now, so they import matplotlib while the batch's configs are composed and checked
    (~3 s for 20 jobs) rather than while the first job waits. Nothing when another launcher
    runs the jobs elsewhere."""
    from omegaconf import OmegaConf

    launcher = OmegaConf.select(config, "hydra.launcher._target_", default="")
    if not str(launcher).endswith(".BasicLauncher") or OmegaConf.select(config, "logging", default=None) is None:
        return
    from attnlab.job import draws_figures

    try:
        draws = draws_figures(config)
    except Exception:  # a value the job's own checks will refuse in one line
        return
    if draws:
        from attnlab import render_process

        render_process.shared(children=render_process.MAX_CHILDREN)
