"""The config schema as plain dataclasses, every key's type and default once (tutorial §5's:
seed 42, d_model 6, d_k 4, d_v = d_model, init std 1.0, Adam lr 0.05, 201 steps, snapshots at 0,
20, 50, 100, 200). ``conf/`` adds what differs; value checks are in :mod:`attnlab.core.checks`."""
from __future__ import annotations

import difflib
import functools
import re
from dataclasses import dataclass, field, fields, is_dataclass
from enum import Enum
from typing import Any, Iterator, Optional

from omegaconf import II, MISSING, DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from attnlab.core.errors import ConfigError, schema_allowed
from attnlab.core.i18n import N_, _, default_language

TUTORIAL_SENTENCE = "Your journey starts with one step"


class Task(str, Enum):
    train = "train"
    walkthrough = "walkthrough"


class Lang(str, Enum):  # what attnlab says is in this language (attnlab.core.i18n)
    zh = "zh"
    en = "en"


class Positional(str, Enum):
    learned = "learned"
    none = "none"


class AttentionPath(str, Enum):
    explicit = "explicit"  # the tutorial's matmul, softmax, matmul (§4)
    sdpa = "sdpa"  # torch.nn.functional.scaled_dot_product_attention (weights recomputed at snapshots)


class Objective(str, Enum):
    mse = "mse"  # tutorial §5: Z against the next token's embedding
    next_token = "next_token"  # cross-entropy of the next token id through a linear head (GPT's objective)


# each objective's loss as axes and pages name it
LOSS_NAMES = {Objective.mse.value: "MSE", Objective.next_token.value: "cross-entropy, nats"}


def loss_name(objectives: Any) -> str | None:
    """"MSE" or "cross-entropy, nats" for these ``train.objective`` values (None: mse); None when they differ."""
    names = {LOSS_NAMES.get(Objective.mse.value if o is None else o) if isinstance(o, (str, type(None))) else None
             for o in objectives}
    return names.pop() if len(names) == 1 else None


def loss_axis_label(objectives: Any) -> str:
    """``loss (MSE)``, ``loss (cross-entropy, nats)`` or ``loss`` (:func:`loss_name`)."""
    name = loss_name(objectives)
    return f"loss ({name})" if name else "loss"


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
    d_k: int = 4  # per head
    d_v: int = II("model.d_model")  # per head
    init_std: float = 1.0
    positional: Positional = Positional.learned
    n_heads: int = 1
    causal: bool = False  # mask future positions (weights above the diagonal are 0)
    dropout: float = 0.0  # on the attention weights, in training only (snapshots record them without)
    qkv_bias: bool = False  # bias in W_query, W_key, W_value
    attention: AttentionPath = AttentionPath.explicit
    out_proj: Any = "auto"  # W_out (n_heads·d_v -> d_model): auto (checks.resolve_out_proj), true or false
    n_layers: int = 0  # 0: the tutorial's one attention layer; N: a mini-GPT of N blocks (core.model.GPT)
    d_ff: Optional[int] = None  # the blocks' MLP width; null: 4·d_model
    context: Optional[int] = None  # a GPT's window of tokens (its position table); null: the whole training text


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
    dampening: float = 0.0
    weight_decay: float = 0.0
    nesterov: bool = False  # needs momentum > 0 and dampening 0


@dataclass
class TrainConfig:
    steps: int = 201
    # null: automatic (snapshot_steps()); or a list of steps in [0, steps)
    snapshot_steps: Optional[list[int]] = None
    snapshot_every: Optional[int] = None  # N: steps 0, N, 2N, ... and the last (when snapshot_steps is null)
    focus_token: Any = None  # a position, a text in the sentence (its first token), or null: its second word or char
    loss_threshold: float = 1e-3  # "steps to threshold" in summaries and TensorBoard hparams
    objective: Objective = Objective.mse
    batch_size: int = 1  # windows of model.context tokens per step (model.n_layers >= 1)
    val_fraction: float = 0.0  # the text's tail held out for a validation loss (model.n_layers >= 1)


@dataclass
class LoggingConfig:
    console: bool = True  # the tutorial's lines at each snapshot step
    progress: bool = True  # a progress bar (on a terminal) for runs of >= 1000 steps
    tensorboard: bool = True  # scalars, text and hparams in the run dir's event file
    images: bool = True  # attention heatmaps in TensorBoard (with tensorboard)
    figures: bool = True  # attention_evolution.png and loss.png in the run dir
    report: bool = True  # report.html in the run dir (and in a sweep dir at the sweep's end)


@dataclass
class AnalysisConfig:
    # exercise 5: apply the job's parameters to this text too and report whether its context
    # vectors are the job's rows permuted (summary.json "permutation_check"; attnlab.core.exercises)
    compare_sentence: Optional[str] = None
    # after training with train.objective=next_token: continue this text (summary.json "generation")
    prompt: Optional[str] = None
    max_new_tokens: int = 8
    temperature: float = 0.0  # 0: greedy (the most probable token); > 0: sampled from softmax(logits / temperature)
    top_k: Optional[int] = None  # sample among the k most probable tokens only


@dataclass
class Config:
    task: Task = Task.train
    lang: Lang = field(default_factory=lambda: Lang(default_language()))  # from the locale, as gettext reads it
    seed: int = 42
    sentence: str = TUTORIAL_SENTENCE
    text_file: Optional[str] = None
    device: str = "cpu"
    threads: Any = "auto"  # torch intra-op threads: auto (1 for small problems; attnlab.core.threads) or a positive int
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optimizer: Any = MISSING
    train: TrainConfig = field(default_factory=TrainConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    analysis: AnalysisConfig = field(default_factory=AnalysisConfig)
    name: Optional[str] = None  # the run's label (a student's name): its folder, summary.json, tables, report
    notes: Optional[str] = None  # free text kept with the run (summary.json, report, TensorBoard)


OPTIMIZERS = {"adam": AdamConfig, "adamw": AdamWConfig, "sgd": SGDConfig}


def optimizer_schema(target: Any) -> type[OptimizerConfig]:
    """The schema of a shipped ``_target_`` (``torch.optim.Adam`` → AdamConfig); else ConfigError."""
    if node := next((node for node in OPTIMIZERS.values() if node._target_ == target), None):
        return node
    shipped = ", ".join(f"{k} ({v._target_})" for k, v in OPTIMIZERS.items())
    raise ConfigError("optimizer._target_", target,
                      _("must be one of the shipped optimizers: {shipped}").format(shipped=shipped))


SNAPSHOT_FRACTIONS = (0.0, 0.1, 0.25, 0.5, 1.0)  # tutorial §5: steps 0, 20, 50, 100, 200 of 0..200
LEARNING_PHASE = (20, 50, 100)  # §5's own early steps: its attention focuses by step ~100


def snapshot_steps(train: Any) -> list[int]:
    """``train``'s snapshot steps, sorted: ``snapshot_steps``; else 0, N, 2N, ... and the last for
    ``snapshot_every`` = N; else :data:`SNAPSHOT_FRACTIONS` of the run and the :data:`LEARNING_PHASE`
    steps it has (5000 steps: 0, 20, 50, 100, 500, 1250, 2500, 4999)."""
    listed, every, steps = (train.get(k) for k in ("snapshot_steps", "snapshot_every", "steps"))
    if listed is not None:
        return sorted(set(listed))
    if every is not None:
        return sorted({*range(0, steps, every), steps - 1})
    last = steps - 1
    return sorted({int(f * last + 0.5) for f in SNAPSHOT_FRACTIONS} | {s for s in LEARNING_PHASE if s < steps})


def walk(data: Any) -> Iterator[tuple[str, Any]]:
    """(key path, value) of every node of plain data, depth first: ``("", data)``, ``("a.b[0]", ...)``."""
    stack = [("", data)]
    while stack:
        key, value = stack.pop()
        yield key, value
        if isinstance(value, dict):
            stack.extend(reversed([(f"{key}.{k}" if key else str(k), v) for k, v in value.items()]))
        elif isinstance(value, list):
            stack.extend(reversed([(f"{key}[{i}]", v) for i, v in enumerate(value)]))


def select(data: Any, dotted: str, default: Any = None) -> Any:
    """``data["a"]["b"]`` for ``"a.b"`` of plain data (nothing resolved), else ``default``."""
    for part in dotted.split("."):
        if not isinstance(data, dict) or part not in data:
            return default
        data = data[part]
    return data


@functools.lru_cache(maxsize=1)
def schema_keys() -> frozenset[str]:
    """Every dotted key of the schema, the keys of all shipped optimizers together."""
    keys = {k for k, _ in walk(OmegaConf.to_container(OmegaConf.structured(Config), throw_on_missing=False))}
    for node in OPTIMIZERS.values():
        keys |= {f"optimizer.{k}" for k, _ in walk(OmegaConf.to_container(OmegaConf.structured(node))) if k}
    return frozenset(k for k in keys if k and "[" not in k)  # a list's items are its key's value


def did_you_mean(key: str) -> str | None:
    """The config key or group (:func:`schema_keys`) closest to a misspelled ``key``, or None; a key given
    without its section (``lr``, ``dmodel``) is the one whose last part is, or is closest to, it (``optimizer.lr``)."""
    key = key.lstrip("+~")
    by_leaf: dict[str, list[str]] = {}
    for k in sorted(schema_keys()):
        by_leaf.setdefault(k.rsplit(".", 1)[-1], []).append(k)
    if "." not in key and (leaf := difflib.get_close_matches(key, sorted(by_leaf), n=1, cutoff=0.75)):
        if len(by_leaf[leaf[0]]) == 1 and by_leaf[leaf[0]][0] != key:
            return by_leaf[leaf[0]][0]
    known = schema_keys() | {k.split(".", 1)[0] for k in schema_keys()}
    close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.75)
    return close[0] if close and close[0] != key else None


def literal(data: Any) -> Any:
    """Plain data with every ``${`` in a string escaped: it loads again as text, nothing resolved."""
    if isinstance(data, str):
        return re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", data)
    if isinstance(data, dict):
        return {key: literal(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [literal(value) for value in data]
    return data


def resolve(cfg: DictConfig) -> dict:
    """A typed ``cfg`` (:func:`apply_schema`) as plain resolved data (enums as strings, a null
    ``train.snapshot_steps`` filled in unless ``snapshot_every`` is set). ConfigError naming an interpolation
    that cannot be resolved (missing, recursive, unset env)."""
    try:
        data = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    except RecursionError:
        raise ConfigError("<config>", None, N_("an interpolation refers to itself (recursive ${...})")) from None
    except OmegaConfBaseException as err:
        key = err.full_key or "<config>"
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raw = OmegaConf.to_container(cfg, resolve=False, enum_to_str=True)
        raise ConfigError(key, select(raw, key), _("cannot be resolved: {reason}").format(reason=reason)) from None
    train = data["train"]
    if train["snapshot_steps"] is None and train["snapshot_every"] is None and train["steps"] > 0:
        train["snapshot_steps"] = snapshot_steps(train)
    return data


def plain(value: Any) -> Any:
    """An Enum config value as its string (``Positional.learned`` → ``"learned"``), others as is."""
    return value.value if isinstance(value, Enum) else value


GROUP_HINT = ("is a section of keys, not a value: a config group option such as logging=off or optimizer=sgd "
              "works with attnlab's own configs, not with --config-path to a saved .hydra/config.yaml (it has "
              "no groups); set the section's keys instead (e.g. logging.tensorboard=false, optimizer.lr=0.01)")


def apply_schema(cfg: Any) -> DictConfig:
    """``cfg`` (composed, or a saved ``.hydra/config.yaml``) typed by :class:`Config`, ``optimizer`` by the
    schema its ``_target_`` names. ConfigError for a section given a value, another ``_target_``, an unknown
    key or a wrong type."""
    if not isinstance(cfg, DictConfig):
        cfg = OmegaConf.create(cfg)
    if OmegaConf.get_type(cfg) is not Config:  # a typed config cannot hold a value where a section goes
        sections = {f.name for f in fields(Config) if f.name == "optimizer" or is_dataclass(f.default_factory)}
        raw = OmegaConf.to_container(cfg, resolve=False)
        for key in sorted(sections & set(raw)):
            if not isinstance(raw[key], dict) and raw[key] != MISSING:
                raise ConfigError(key, raw[key], GROUP_HINT)
    schema = optimizer_schema(OmegaConf.select(cfg, "optimizer._target_", default=None))
    if OmegaConf.get_type(cfg) is Config and OmegaConf.get_type(cfg.optimizer) is schema:
        OmegaConf.set_struct(cfg, True)  # already typed (composed by Hydra onto the schema)
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
        msg = schema_allowed(getattr(err, "msg", str(err)))
        if "not in" in msg:  # ConfigKeyError: Key 'n_heads' not in 'ModelConfig'
            msg = N_("is not a key of attnlab's config schema (a config from another attnlab version?)")
        raise ConfigError(key or "<root>", value, msg) from None
    OmegaConf.set_struct(typed, True)
    return typed
