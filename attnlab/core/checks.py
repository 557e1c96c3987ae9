"""Value checks a schema type cannot express, each raising one line that names the key, the
value and what is allowed (:class:`~attnlab.core.errors.ConfigError`).

:func:`validate` runs before anything is built; :func:`resources` once the token count T is
known (the checks of T itself are in :func:`attnlab.core.tokenizer.tokenize`): it estimates the
memory and disk a run needs and refuses one that cannot fit, before anything is allocated.
"""
from __future__ import annotations

import math
import os
import shutil
from pathlib import Path
from typing import Callable

from omegaconf import DictConfig, OmegaConf

from attnlab.core.config import Task, optimizer_schema, plain, snapshot_steps
from attnlab.core.errors import ConfigError

INT64_MAX = 2**63 - 1
SEED_RANGE = (-(2**63), 2**64 - 1)  # what torch.manual_seed accepts
FLOAT32_BYTES = 4
METRICS_ROW_BYTES = 28  # "12345,0.123456789012345678\n"
TENSORBOARD_STEP_BYTES = 64  # one scalar event per step (about 60 bytes)
TENSORBOARD_IMAGE_BYTES = 120_000  # one heatmap PNG per snapshot (460 x 400 px)


def _real(cfg: DictConfig, key: str, ok: Callable[[float], bool], allowed: str) -> None:
    """Raise ConfigError(key, value, allowed) unless the value is a finite number with ``ok``."""
    value = OmegaConf.select(cfg, key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not ok(value):
        raise ConfigError(key, value, allowed)


def _int_in(cfg: DictConfig, key: str, low: int, high: int, what: str) -> None:
    value = OmegaConf.select(cfg, key)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(key, value, what)


def validate(cfg: DictConfig) -> None:
    """Check the values a schema type cannot; raises ConfigError on the first bad one."""
    _int_in(cfg, "seed", *SEED_RANGE, f"must be an integer in [{SEED_RANGE[0]}, {SEED_RANGE[1]}] "
            "(what torch.manual_seed accepts)")
    for key in ("model.d_model", "model.d_k", "model.d_v", "model.n_heads", "train.steps", "tokenizer.max_tokens"):
        _int_in(cfg, key, 1, INT64_MAX, "must be a positive integer")
    _real(cfg, "model.dropout", lambda v: 0 <= v < 1, "must be in [0, 1) (the probability of zeroing a weight)")
    out_proj(cfg)
    _int_in(cfg, "train.focus_token", 0, INT64_MAX, "must be a token position (an integer >= 0)")
    _real(cfg, "model.init_std", lambda v: v >= 0, "must be >= 0 and finite")
    _optimizer(cfg)
    steps = cfg.train.steps
    if cfg.train.snapshot_steps is not None:
        for s in cfg.train.snapshot_steps:
            if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s < steps:
                raise ConfigError("train.snapshot_steps", list(cfg.train.snapshot_steps),
                                  f"every step must be in [0, train.steps={steps}) "
                                  "(or leave it null: 0, 10, 25, 50, 100 % of the run)")
    _real(cfg, "train.loss_threshold", lambda v: v > 0, "must be > 0 and finite")
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


def out_proj(cfg: DictConfig) -> bool:
    """Whether the model gets an output projection W_out (``model.out_proj``: auto, true,
    false; the rule is :func:`attnlab.core.projection.resolve_out_proj`'s). Raises ConfigError for
    another value, or for ``false`` when training needs Z in d_model columns and
    n_heads·d_v differs from d_model."""
    from attnlab.core.projection import resolve_out_proj

    value = cfg.model.out_proj
    value = {"true": True, "false": False}.get(value, value) if isinstance(value, str) else value
    m = cfg.model
    try:
        return resolve_out_proj(value, m.n_heads, m.d_v, m.d_model, z_in_d_model=cfg.task == Task.train)
    except ConfigError as err:
        raise ConfigError("model.out_proj", cfg.model.out_proj, err.allowed) from None


def _optimizer(cfg: DictConfig) -> None:
    """The optimizer's settings as torch.optim would check them, as data (nothing is built)."""
    optimizer_schema(OmegaConf.select(cfg, "optimizer._target_"))
    opt = cfg.optimizer
    _real(cfg, "optimizer.lr", lambda v: v > 0, "must be a positive finite number")
    for key in ("eps", "weight_decay", "momentum"):
        if key in opt:
            _real(cfg, f"optimizer.{key}", lambda v: v >= 0, "must be >= 0 and finite")
    if "dampening" in opt:
        _real(cfg, "optimizer.dampening", lambda v: True, "must be a finite number")
    if "betas" in opt:
        betas = OmegaConf.to_container(opt.betas) if OmegaConf.is_list(opt.betas) else opt.betas
        if (not isinstance(betas, list) or len(betas) != 2
                or not all(isinstance(b, (int, float)) and not isinstance(b, bool) and 0 <= b < 1 for b in betas)):
            raise ConfigError("optimizer.betas", betas, "must be two numbers in [0, 1), e.g. [0.9,0.999]")
    if opt.get("nesterov") and (opt.momentum <= 0 or opt.dampening != 0):
        raise ConfigError("optimizer.nesterov", True, f"needs optimizer.momentum > 0 and optimizer.dampening=0 "
                          f"(momentum={opt.momentum}, dampening={opt.dampening})")


def _gib(n_bytes: float) -> str:
    """``n_bytes`` for a message: GiB, MiB or KiB with one decimal, whichever is the largest unit
    it reaches ("0.0 GiB" said nothing of a 40 MB part), else bytes."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n_bytes >= size:
            return f"{n_bytes / size:.1f} {unit}"
    return f"{int(n_bytes)} bytes"


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation: ``MemAvailable`` from /proc/meminfo on
    Linux, else the physical memory size; None when neither can be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def memory_estimate(cfg: DictConfig, seq_len: int, vocab_size: int) -> dict[str, float]:
    """Bytes a run needs, by part: ``token_embedding`` (vocab_size, d_model), ``attention``
    (the Q/K/V weights of every head and W_out, with their gradients and two Adam moments),
    ``next_token_head`` (the objective's (vocab_size, d_model) head, trained, and its (T, vocab)
    logits), ``activations`` (X, Q, K, V, Z and the (H, T, T) scores and weights of forward and
    backward). float32 throughout; a lower bound good to a few percent for the sizes that matter."""
    m = cfg.model
    d_model, d_k, d_v, heads, t = m.d_model, m.d_k, m.d_v, m.n_heads, seq_len
    next_token = plain(cfg.train.objective) == "next_token" and plain(cfg.task) == "train"
    return {
        "token_embedding": FLOAT32_BYTES * vocab_size * d_model,
        "attention": FLOAT32_BYTES * 4 * heads * d_model * (2 * d_k + d_v + (d_v if out_proj(cfg) else 0)),
        "next_token_head": FLOAT32_BYTES * (4 * vocab_size * d_model + 3 * t * vocab_size) if next_token else 0,
        "activations": FLOAT32_BYTES * (6 * heads * t * t + t * (4 * d_model + 4 * heads * (d_k + d_v))),
    }


def disk_estimate(cfg: DictConfig, seq_len: int) -> dict[str, float]:
    """Bytes a training run writes into its run dir, by part: ``metrics.csv`` (a row per step),
    ``attention.npz`` (a (T, T) float32 matrix per snapshot), TensorBoard (a scalar per step,
    a PNG per snapshot when ``logging.images``)."""
    n_snaps = len(snapshot_steps(cfg.train))
    parts = {"metrics.csv": METRICS_ROW_BYTES * cfg.train.steps,
             "attention.npz": FLOAT32_BYTES * n_snaps * cfg.model.n_heads * seq_len * seq_len}
    if cfg.logging.tensorboard:
        parts["tensorboard"] = (TENSORBOARD_STEP_BYTES * cfg.train.steps
                                + (TENSORBOARD_IMAGE_BYTES * n_snaps if cfg.logging.images else 0))
    return parts


def resources(cfg: DictConfig, seq_len: int, vocab_size: int, run_dir: Path | None = None) -> None:
    """Refuse, before anything is allocated, a run whose memory (:func:`memory_estimate`) is
    more than the memory available, or whose run-dir files (:func:`disk_estimate`, training
    only) are more than the free space where ``run_dir`` lies. Raises ConfigError naming the
    key that makes the run large (``model.d_model``, the text, ``train.steps`` or
    ``train.snapshot_steps``)."""
    need = memory_estimate(cfg, seq_len, vocab_size)
    available = available_memory()
    if available is not None and sum(need.values()) > available:
        key, value = (("model.d_model", cfg.model.d_model) if need["token_embedding"] >= need["activations"]
                      else ("text_file", cfg.text_file) if cfg.get("text_file") else ("sentence", f"{seq_len} tokens"))
        parts = ", ".join(f"{name} {_gib(n)}" for name, n in need.items() if n)
        raise ConfigError(key, value, f"the run needs about {_gib(sum(need.values()))} of memory ({parts}), "
                          f"more than the {_gib(available)} available")
    if run_dir is None or plain(cfg.task) != "train":
        return
    disk = disk_estimate(cfg, seq_len)
    existing = Path(run_dir)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    free = shutil.disk_usage(existing).free
    if sum(disk.values()) > free:
        key = "train.steps" if disk["metrics.csv"] >= disk["attention.npz"] else "train.snapshot_steps"
        value = cfg.train.steps if key == "train.steps" else cfg.train.snapshot_steps
        parts = ", ".join(f"{name} {_gib(n)}" for name, n in disk.items())
        raise ConfigError(key, value, f"the run would write about {_gib(sum(disk.values()))} ({parts}), "
                          f"more than the {_gib(free)} free on the disk of {existing}")
