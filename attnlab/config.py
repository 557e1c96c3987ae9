"""The config schema (Hydra structured configs) and the checks that say what is wrong.

The dataclasses below are registered in Hydra's ConfigStore (``register_configs``) and back the
YAML files in ``conf/``: a mistyped key or a value of the wrong type is reported by Hydra itself
(``model.d_model=abc``). Value checks that a type cannot express (positive sizes, snapshot steps
inside the run, ...) are in :func:`validate`, which raises :class:`~attnlab.errors.ConfigError`
with one line naming the key, the value and what is allowed.

Defaults are the tutorial's section 5 (seed 42, d_model 6, d_k 4, d_v = d_model, init std 1.0,
Adam lr 0.05, 201 steps, snapshots at 0, 20, 50, 100, 200, focus on token 1, ' journey').
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Optional

from omegaconf import II, MISSING, DictConfig, OmegaConf

from attnlab.errors import ConfigError

TUTORIAL_SENTENCE = "Your journey starts with one step"


class Task(str, Enum):
    train = "train"
    walkthrough = "walkthrough"


class Positional(str, Enum):
    learned = "learned"
    none = "none"


class SpecialTokens(str, Enum):
    special = "special"  # "<|endoftext|>" becomes the special token (50256 in GPT-2)
    text = "text"  # "<|endoftext|>" is encoded as ordinary text


@dataclass
class TokenizerConfig:
    encoding: str = "gpt2"
    special_tokens: SpecialTokens = SpecialTokens.special
    max_tokens: int = 4096


@dataclass
class ModelConfig:
    d_model: int = 6
    d_k: int = 4
    d_v: int = II("model.d_model")
    init_std: float = 1.0
    positional: Positional = Positional.learned


@dataclass
class OptimizerConfig:
    _target_: str = MISSING
    lr: float = MISSING


@dataclass
class AdamConfig(OptimizerConfig):
    _target_: str = "torch.optim.Adam"
    lr: float = 0.05
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0


@dataclass
class AdamWConfig(AdamConfig):
    _target_: str = "torch.optim.AdamW"
    weight_decay: float = 0.01


@dataclass
class SGDConfig(OptimizerConfig):
    _target_: str = "torch.optim.SGD"
    lr: float = 0.05
    momentum: float = 0.0
    weight_decay: float = 0.0


@dataclass
class TrainConfig:
    steps: int = 201
    snapshot_steps: list[int] = field(default_factory=lambda: [0, 20, 50, 100, 200])
    focus_token: int = 1
    loss_threshold: float = 1e-3
    progress: bool = True


@dataclass
class LoggingConfig:
    console: bool = True
    tensorboard: bool = True
    images: bool = True
    figures: bool = True


@dataclass
class AnalysisConfig:
    # exercise 5: apply the job's parameters to this text too and report whether its context
    # vectors are the job's rows permuted (summary.json "permutation_check"; attnlab.exercises)
    compare_sentence: Optional[str] = None


@dataclass
class Config:
    task: Task = Task.train
    seed: int = 42
    sentence: str = TUTORIAL_SENTENCE
    text_file: Optional[str] = None
    device: str = "cpu"
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optimizer: Any = MISSING
    train: TrainConfig = field(default_factory=TrainConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    analysis: AnalysisConfig = field(default_factory=AnalysisConfig)


OPTIMIZERS = {"adam": AdamConfig, "adamw": AdamWConfig, "sgd": SGDConfig}


def optimizer_schema(target: Any) -> type[OptimizerConfig]:
    """The schema class of a shipped optimizer ``_target_`` (``torch.optim.Adam`` → AdamConfig).

    The one allow-list of what attnlab instantiates: raises ConfigError for any other target,
    so a shared config cannot make attnlab import arbitrary code.
    """
    for node in OPTIMIZERS.values():
        if node._target_ == target:
            return node
    allowed = ", ".join(f"{k} ({v._target_})" for k, v in OPTIMIZERS.items())
    raise ConfigError("optimizer._target_", target, f"must be one of the shipped optimizers: {allowed}")


def register_configs() -> None:
    """Register the schema nodes that ``conf/`` YAML files extend (``base_config``,
    ``schema/optimizer/adam`` ...). Safe to call more than once."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    for name, node in OPTIMIZERS.items():
        cs.store(group="schema/optimizer", name=name, node=node)


def _positive_int(cfg: DictConfig, key: str) -> None:
    value = OmegaConf.select(cfg, key)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(key, value, "must be a positive integer")


def validate(cfg: DictConfig) -> None:
    """Check the values a schema type cannot; raises ConfigError on the first bad one.

    Token-dependent checks (sentence length, focus token) are in :func:`validate_tokens`.
    """
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
    if cfg.device != "cpu" and not cfg.device.startswith(("cuda", "mps")):
        raise ConfigError("device", cfg.device, "must be cpu, cuda, cuda:N or mps")
    if cfg.device != "cpu":
        import torch

        available = (torch.cuda.is_available() if cfg.device.startswith("cuda")
                     else torch.backends.mps.is_available())
        if not available:
            raise ConfigError("device", cfg.device, "is not available on this machine; use device=cpu")


def validate_tokens(cfg: DictConfig, n_tokens: int) -> None:
    """Checks that need the tokenized sentence: T (``n_tokens``) in [2, tokenizer.max_tokens]
    for training (one token leaves nothing to predict), focus token in [0, T)."""
    key = "text_file" if cfg.get("text_file") else "sentence"
    shown = cfg.text_file if key == "text_file" else cfg.sentence
    if n_tokens == 0:
        raise ConfigError(key, shown, "is empty: give at least 2 tokens of text")
    if n_tokens > cfg.tokenizer.max_tokens:
        raise ConfigError(key, _short(shown), f"has {n_tokens} tokens, more than tokenizer.max_tokens="
                          f"{cfg.tokenizer.max_tokens} (raise it to allow longer text)")
    if cfg.task == Task.train and n_tokens < 2:
        raise ConfigError(key, shown, "has 1 token: training predicts the next token, give at least 2")
    f = cfg.train.focus_token
    if not 0 <= f < n_tokens:
        raise ConfigError("train.focus_token", f, f"must be a token position in [0, {n_tokens}) "
                          f"(the text has {n_tokens} token{'' if n_tokens == 1 else 's'})")


def _short(text: str, n: int = 40) -> str:
    return text if len(text) <= n else text[:n] + "…"


def plain(value: Any) -> Any:
    """An Enum config value as its string (``Positional.learned`` → ``"learned"``), others as is."""
    return value.value if isinstance(value, Enum) else value


def to_plain(cfg: DictConfig) -> dict:
    """The resolved config as plain Python values (enums as strings), e.g. for JSON or hparams."""
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)  # type: ignore[return-value]


def apply_schema(cfg: Any) -> DictConfig:
    """``cfg`` (a composed config, e.g. a saved ``.hydra/config.yaml`` loaded as plain data)
    merged onto the :class:`Config` schema, with ``optimizer`` merged onto the shipped
    optimizer class its ``_target_`` names. Nothing is imported or instantiated.

    Raises ConfigError (one line) for a ``_target_`` outside the shipped torch.optim classes, a
    key the schema does not have (``hydra``, ``defaults``, ``model._target_``, keys of another
    attnlab version) or a value of the wrong type. A config already typed by this schema (as Hydra
    composes it) is returned as is.
    """
    from omegaconf.errors import OmegaConfBaseException

    if not isinstance(cfg, DictConfig):
        cfg = OmegaConf.create(cfg)
    schema = optimizer_schema(OmegaConf.select(cfg, "optimizer._target_", default=None))
    if OmegaConf.get_type(cfg) is Config and OmegaConf.get_type(cfg.optimizer) is schema:
        OmegaConf.set_struct(cfg, True)  # already typed (composed by Hydra onto the schema): ~30 ms saved
        return cfg
    try:
        optimizer = OmegaConf.merge(OmegaConf.structured(schema), cfg.optimizer)
        rest = OmegaConf.masked_copy(cfg, [k for k in cfg.keys() if k != "optimizer"])
        typed = OmegaConf.merge(OmegaConf.structured(Config), rest)
        typed.optimizer = optimizer
    except OmegaConfBaseException as err:
        key = err.full_key or ""
        if key and err.object_type in OPTIMIZERS.values() and not key.startswith("optimizer"):
            key = f"optimizer.{key}"
        value = OmegaConf.select(cfg, key, default=None, throw_on_missing=False) if key else None
        msg = getattr(err, "msg", str(err)).splitlines()[0]
        if "not in" in msg:  # ConfigKeyError: Key 'n_heads' not in 'ModelConfig'
            msg = "is not a key of attnlab's config schema (a config from another attnlab version?)"
        raise ConfigError(key or "<root>", value, msg) from None
    OmegaConf.set_struct(typed, True)
    return typed
