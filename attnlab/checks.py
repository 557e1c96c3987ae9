"""Value checks a schema type cannot express, each raising one line that names the key, the
value and what is allowed (:class:`~attnlab.errors.ConfigError`).

:func:`validate` runs before anything is built; the checks that need the token count
(text length, focus token) are in :func:`attnlab.tokenizer.tokenize`.
"""
from __future__ import annotations

import math

from omegaconf import DictConfig, OmegaConf

from attnlab.config import Task, optimizer_schema
from attnlab.errors import ConfigError


def _positive_int(cfg: DictConfig, key: str) -> None:
    value = OmegaConf.select(cfg, key)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(key, value, "must be a positive integer")


def validate(cfg: DictConfig) -> None:
    """Check the values a schema type cannot; raises ConfigError on the first bad one."""
    for key in ("model.d_model", "model.d_k", "model.d_v", "train.steps", "tokenizer.max_tokens"):
        _positive_int(cfg, key)
    if not 0 <= cfg.model.init_std < math.inf:
        raise ConfigError("model.init_std", cfg.model.init_std, "must be >= 0 and finite")
    optimizer_schema(OmegaConf.select(cfg, "optimizer._target_"))
    lr = OmegaConf.select(cfg, "optimizer.lr")
    if not isinstance(lr, (int, float)) or not 0 < lr < math.inf:
        raise ConfigError("optimizer.lr", lr, "must be a positive finite number")
    steps = cfg.train.steps
    for s in cfg.train.snapshot_steps:
        if not isinstance(s, int) or not 0 <= s < steps:
            raise ConfigError("train.snapshot_steps", list(cfg.train.snapshot_steps),
                              f"every step must be in [0, train.steps={steps})")
    if not cfg.train.loss_threshold > 0:
        raise ConfigError("train.loss_threshold", cfg.train.loss_threshold, "must be > 0")
    if cfg.task == Task.train and cfg.model.d_v != cfg.model.d_model:
        raise ConfigError("model.d_v", cfg.model.d_v, f"must equal model.d_model={cfg.model.d_model} for "
                          "task=train: the loss compares Z (T, d_v) with the next X (T, d_model)")
    threads = cfg.get("threads", "auto")
    if threads != "auto" and (isinstance(threads, bool) or not isinstance(threads, int) or threads <= 0):
        raise ConfigError("threads", threads, "must be auto or a positive integer")
    if cfg.device != "cpu" and not cfg.device.startswith(("cuda", "mps")):
        raise ConfigError("device", cfg.device, "must be cpu, cuda, cuda:N or mps")
    if cfg.device != "cpu":
        import torch

        available = (torch.cuda.is_available() if cfg.device.startswith("cuda")
                     else torch.backends.mps.is_available())
        if not available:
            raise ConfigError("device", cfg.device, "is not available on this machine; use device=cpu")
