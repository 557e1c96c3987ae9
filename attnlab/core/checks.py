"""Value checks a schema type cannot express: :data:`RULES` of (key, check, what is allowed); a
failure is one ConfigError ``key=value: what is allowed``. :func:`resources`, once T is known,
estimates what the run asks (memory, files, heatmaps, console width, threads).
"""
from __future__ import annotations

import math
import os
import shutil
from pathlib import Path
from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf

from attnlab.core import files
from attnlab.core.config import plain, snapshot_steps
from attnlab.core.errors import ConfigError
from attnlab.core.files import METRICS_LIMIT, NPZ_LIMIT, SUMMARY_LIMIT, TOKEN_CHARS, printable
from attnlab.core.i18n import N_, _
from attnlab.core.tokenizer import ALLOWED_ENCODINGS, SHIPPED_ENCODINGS, Tokens, tokenize

INT64_MAX = 2**63 - 1
SEED_RANGE = (-(2**63), 2**64 - 1)  # what torch.manual_seed accepts
FLOAT32_BYTES = 4
LOSS_CHARS = 24  # at most, of one loss in metrics.csv (repr of a float64: "-2.2250738585072014e-308")
TENSORBOARD_STEP_BYTES = 64  # one scalar event per step
TENSORBOARD_IMAGE_BYTES = 120_000  # one heatmap PNG per snapshot
MAX_HEATMAPS = 1000  # heatmaps a run draws (figures and TensorBoard images; ~0.3 s each on 2 busy cores)
MAX_CONSOLE_LINE = 10_000  # characters of one console line (the heads line: ~24 per head)
NAME_CHARS, NOTES_CHARS = 100, 2000  # of a run's name and notes
THREADS_PER_CPU = 4  # torch threads a run may ask for, per CPU of this machine
MAX_NEW_TOKENS = 10_000  # tokens one generation may add (analysis.max_new_tokens, attnlab-generate --max-new-tokens)
SUMMARY_BASE = 64 * 1024  # bytes of summary.json besides its per-head fields (config, token table, versions, ...)
SUMMARY_PER_HEAD, SUMMARY_PER_HEAD_TOKEN = 160, 24  # bytes per head (and block) of summary.json's focus, and per token
SUMMARY_PER_NEW_TOKEN = 100  # bytes per generated token in summary.json
Check = Callable[[Any, DictConfig], bool]


def _int(low: int, high: int) -> Check:
    return lambda v, cfg: isinstance(v, int) and not isinstance(v, bool) and low <= v <= high


def _real(ok: Callable[[float], bool]) -> Check:
    return lambda v, cfg: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and ok(v)


def _optional(check: Check) -> Check:
    return lambda v, cfg: v is None or check(v, cfg)


def _predicts_tokens(cfg: DictConfig) -> bool:
    return plain(cfg.task) == "train" and plain(cfg.train.objective) == "next_token"


def _device_available(device: str) -> bool:
    if device == "cpu":
        return True
    import torch

    return torch.cuda.is_available() if device.startswith("cuda") else torch.backends.mps.is_available()


POSITIVE = (_int(1, INT64_MAX), N_("must be a positive integer"))
RULES: list[tuple[str, Check, str | Callable[[DictConfig], str]]] = [
    ("seed", _int(*SEED_RANGE), lambda cfg: _("must be an integer in [{low}, {high}] (what torch.manual_seed "
                                             "accepts)").format(low=SEED_RANGE[0], high=SEED_RANGE[1])),
    *((key, lambda v, cfg, n=n: v is None or isinstance(v, str) and len(v) <= n and printable(v, n) == v,
       lambda cfg, n=n: _("must be text of at most {n} characters on one line (no control characters)").format(n=n))
      for key, n in (("name", NAME_CHARS), ("notes", NOTES_CHARS))),  # printable() shows it unchanged
    ("tokenizer.encoding", lambda v, cfg: v in SHIPPED_ENCODINGS, ALLOWED_ENCODINGS),  # nothing downloaded
    *((key, *POSITIVE) for key in ("model.d_model", "model.d_k", "model.d_v", "model.n_heads", "train.steps",
                                   "tokenizer.max_tokens")),
    ("model.dropout", _real(lambda v: 0 <= v < 1), N_("must be in [0, 1) (the probability of zeroing a weight)")),
    ("model.out_proj", lambda v, cfg: v == "auto" or isinstance(v, bool), N_("must be auto, true or false")),
    ("model.out_proj", lambda v, cfg: v or plain(cfg.task) != "train"  # §5's loss needs Z in d_model columns
     or cfg.model.n_heads * cfg.model.d_v == cfg.model.d_model, lambda cfg: _(
        "Z has n_heads·d_v = {n_heads}·{d_v} = {columns} columns but the loss needs d_model = {d_model}; use "
        "out_proj=auto or true (a W_out brings Z to d_model), or make n_heads·d_v = d_model").format(
        columns=cfg.model.n_heads * cfg.model.d_v, **cfg.model)),
    ("train.focus_token", lambda v, cfg: v is None or (isinstance(v, str) and v != "") or _int(0, INT64_MAX)(v, cfg),
     N_("must be a token position (an integer >= 0), a text in the sentence, or null (its second word or character)")),
    ("model.init_std", _real(lambda v: v >= 0), N_("must be >= 0 and finite")),
    ("optimizer.lr", _real(lambda v: v > 0), N_("must be a positive finite number")),
    *((f"optimizer.{key}", _optional(_real(lambda v: v >= 0)), N_("must be >= 0 and finite"))
      for key in ("eps", "weight_decay", "momentum")),
    ("optimizer.dampening", _optional(_real(lambda v: True)), N_("must be a finite number")),
    ("optimizer.betas", _optional(lambda v, cfg: isinstance(v, list) and len(v) == 2
                                  and all(_real(lambda b: 0 <= b < 1)(b, cfg) for b in v)),
     N_("must be two numbers in [0, 1), e.g. [0.9,0.999]")),
    ("optimizer.nesterov", _optional(lambda v, cfg: not v or (cfg.optimizer.momentum > 0
                                                               and cfg.optimizer.dampening == 0)),
     lambda cfg: _("needs optimizer.momentum > 0 and optimizer.dampening=0 (momentum={momentum}, "
                   "dampening={dampening})").format(momentum=cfg.optimizer.momentum,
                                                    dampening=cfg.optimizer.dampening)),
    ("train.snapshot_steps", _optional(lambda v, cfg: all(_int(0, cfg.train.steps - 1)(s, cfg) for s in v)),
     lambda cfg: _("every step must be in [0, train.steps={steps}) (or leave it null: automatic, or every "
                   "train.snapshot_every steps)").format(steps=cfg.train.steps)),
    ("train.snapshot_every", _optional(lambda v, cfg: _int(1, INT64_MAX)(v, cfg) and cfg.train.snapshot_steps is None),
     N_("must be a positive integer (the steps between snapshots) and train.snapshot_steps null (it lists them)")),
    ("train.loss_threshold", _real(lambda v: v > 0), N_("must be > 0 and finite")),
    ("threads", _optional(lambda v, cfg: v == "auto" or _int(1, INT64_MAX)(v, cfg)),
     N_("must be auto or a positive integer")),
    ("model.n_layers", _int(0, INT64_MAX), N_("must be an integer >= 0 (0: the tutorial's one layer)")),
    ("model.n_layers", lambda v, cfg: v == 0 or _predicts_tokens(cfg),
     N_("N >= 1 builds a GPT, which trains with task=train train.objective=next_token (the mse target and the "
       "walkthrough are the tutorial's one layer: use model.n_layers=0)")),
    *((key, _optional(POSITIVE[0]), N_("must be a positive integer or null"))
      for key in ("model.d_ff", "model.context", "analysis.top_k")),
    *((key, ok, N_("needs model.n_layers >= 1 (the tutorial's layer trains on the whole text at once)"))
      for key, ok in (("model.context", lambda v, cfg: v is None or cfg.model.n_layers > 0),
                      ("train.batch_size", lambda v, cfg: v == 1 or cfg.model.n_layers > 0),
                      ("train.val_fraction", lambda v, cfg: v == 0 or cfg.model.n_layers > 0))),
    ("train.batch_size", *POSITIVE),
    ("train.val_fraction", _real(lambda v: 0 <= v < 1), N_("must be in [0, 1) (the share of the text held out)")),
    ("analysis.compare_sentence", lambda v, cfg: v is None or cfg.model.n_layers == 0,
     N_("needs model.n_layers=0 (exercise 5 is about the tutorial's one layer)")),
    ("analysis.prompt", lambda v, cfg: v is None or (v != "" and _predicts_tokens(cfg)),
     N_("a non-empty text, with task=train train.objective=next_token (a model that predicts tokens)")),
    ("analysis.max_new_tokens", _int(1, MAX_NEW_TOKENS), lambda cfg: _("must be an integer in [1, {n}]").format(
        n=MAX_NEW_TOKENS)),
    ("analysis.temperature", _real(lambda v: v >= 0), N_("must be >= 0 and finite (0: greedy)")),
    ("device", lambda v, cfg: isinstance(v, str) and (v == "cpu" or v.startswith(("cuda", "mps"))),
     N_("must be cpu, cuda, cuda:N or mps")),
    ("device", lambda v, cfg: _device_available(v), N_("is not available on this machine; use device=cpu")),
]


def validate(cfg: DictConfig) -> None:
    """ConfigError at the first value :data:`RULES` refuses."""
    for key, ok, allowed in RULES:
        value = OmegaConf.select(cfg, key, default=None)
        if OmegaConf.is_config(value):
            value = OmegaConf.to_container(value, resolve=True)
            if isinstance(value, tuple):  # OmegaConf >= 2.4 gives a tuple-typed node (optimizer.betas) as a tuple
                value = list(value)
        if not ok(value, cfg):
            raise ConfigError(key, value, allowed(cfg) if callable(allowed) else allowed)


def validated_tokens(cfg: DictConfig) -> Tokens:
    """Tutorial §1 on a checked config, before torch loads: :func:`validate`, the text tokenized (its length,
    ``train.focus_token`` in it) and a GPT's windows (:func:`corpus_split`). ConfigError / TokenizerError.
    A job does it once and passes the :class:`Tokens` down (training, the walkthrough, exercise 5)."""
    validate(cfg)
    tokens = tokenize(cfg)
    window = recorded_window(cfg, tokens.seq_len)
    if tokens.focus >= window:
        raise ConfigError("train.focus_token", cfg.train.focus_token, _(
            "must be a position in the recorded window [0, {context})").format(context=window))
    return tokens


def recorded_window(cfg: DictConfig, n_tokens: int) -> int:
    """Tokens the model sees at once: a GPT's context (:func:`corpus_split`), else the text's ``n_tokens``."""
    return corpus_split(cfg, n_tokens)[1] if cfg.model.n_layers else n_tokens


def corpus_split(cfg: DictConfig, n_tokens: int) -> tuple[int, int]:
    """(tokens trained on, context): the text's head; its last ``round(n_tokens·train.val_fraction)``
    tokens are held out. ConfigError when the context does not fit in the head, or the held-out
    tail has 1 token."""
    n_val = round(n_tokens * cfg.train.val_fraction)
    n_train = n_tokens - n_val
    context = cfg.model.context or n_train
    if not 2 <= context <= n_train:
        raise ConfigError("model.context", cfg.model.context, _(
            "a window must have 2 to {n} tokens (the text's {n} trained on)").format(n=n_train))
    if n_val == 1:
        raise ConfigError("train.val_fraction", cfg.train.val_fraction, _(
            "holds out 1 token of {n}: a validation loss needs at least 2").format(n=n_tokens))
    return n_train, context


def out_proj(cfg: DictConfig) -> bool:
    """Whether the model gets W_out (:func:`resolve_out_proj`) for a checked ``cfg``."""
    return resolve_out_proj(cfg.model.out_proj, cfg.model.n_heads, cfg.model.d_v, cfg.model.d_model,
                            z_in_d_model=plain(cfg.task) == "train")


def resolve_out_proj(out_proj: bool | str, n_heads: int, d_v: int, d_model: int, *, z_in_d_model: bool) -> bool:
    """Whether the attention gets W_out (H·d_v → d_model): ``True`` / ``False`` as given; ``"auto"`` when H > 1
    (it mixes the heads, Vaswani et al. §3.2.2) or when ``z_in_d_model`` (§5's loss needs Z in d_model
    columns) and H·d_v ≠ d_model. :data:`RULES` refuse ``False`` then."""
    if isinstance(out_proj, bool):
        return out_proj
    return n_heads > 1 or (z_in_d_model and n_heads * d_v != d_model)


def _size(n_bytes: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n_bytes >= size:
            return f"{n_bytes / size:.1f} {unit}"
    return f"{int(n_bytes)} bytes"


def available_memory() -> int | None:
    """Bytes of physical memory (``os.sysconf``: Linux, macOS); None on Windows, where the check is skipped."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def gpt_parameters(cfg: DictConfig, vocab_size: int, context: int) -> int:
    """The exact number of parameters of :class:`attnlab.core.model.GPT` for ``cfg.model``, nothing built:
    the token and position tables; per block 2 LayerNorms, W_query, W_key, W_value (biases), W_out, W_fc and
    W_proj with biases; ln_f and the head."""
    m = cfg.model
    d, h, qkv = m.d_model, m.n_heads, 2 * m.d_k + m.d_v
    f = m.d_ff or 4 * d
    block = 4 * d + h * qkv * d + (h * qkv if m.qkv_bias else 0) + h * m.d_v * d + 2 * d * f + f + d
    return 2 * vocab_size * d + context * d + m.n_layers * block + 2 * d


def memory_estimate(cfg: DictConfig, seq_len: int, vocab_size: int) -> dict[str, float]:
    """Bytes a run needs by part, float32, a lower bound. The tutorial's layer: the (vocab, d_model) table,
    the attention's weights with gradients and two Adam moments, the next-token head with its (T, vocab)
    logits, the activations (X, Q, K, V, Z, (H, T, T) scores and weights). A GPT: its parameters with
    gradients and two Adam moments; each block's activations and the logits of a batch of windows."""
    m, t = cfg.model, seq_len
    if m.n_layers:
        c, b, f = recorded_window(cfg, seq_len), cfg.train.batch_size, m.d_ff or 4 * m.d_model
        per_token = m.n_layers * (8 * m.d_model + 3 * m.n_heads * (2 * m.d_k + m.d_v) + 2 * f + 3 * m.n_heads * c)
        return {"parameters": FLOAT32_BYTES * 4 * gpt_parameters(cfg, vocab_size, c),
                "activations": FLOAT32_BYTES * b * c * per_token,
                "logits": FLOAT32_BYTES * 3 * b * c * vocab_size}
    return {
        "token_embedding": FLOAT32_BYTES * vocab_size * m.d_model,
        "attention": FLOAT32_BYTES * 4 * m.n_heads * m.d_model * (2 * m.d_k + m.d_v + (m.d_v if out_proj(cfg) else 0)),
        "next_token_head": FLOAT32_BYTES * (4 * vocab_size * m.d_model + 3 * t * vocab_size)
        if _predicts_tokens(cfg) else 0,
        "activations": FLOAT32_BYTES * (6 * m.n_heads * t * t + t * (4 * m.d_model + 4 * m.n_heads * (m.d_k + m.d_v))),
    }


def disk_estimate(cfg: DictConfig, seq_len: int, vocab_size: int = 0) -> dict[str, float]:
    """Bytes a training run writes at most, by file: a row per step, an (H, T, T) float32 per snapshot and
    block, a GPT's float32 parameters, summary.json's focus per head and block and generated tokens."""
    n_snaps, steps, m = len(snapshot_steps(cfg.train)), cfg.train.steps, cfg.model
    t = recorded_window(cfg, seq_len)
    heads = (m.n_heads + 1) * (1 + m.n_layers)  # each head and their mean, for each block
    generated = cfg.analysis.max_new_tokens if cfg.analysis.prompt is not None else 0
    parts = {"metrics.csv": (len(str(steps - 1)) + LOSS_CHARS + 2) * steps,
             "attention.npz": (FLOAT32_BYTES * n_snaps * m.n_heads * t * t * (1 + m.n_layers)
                               + t * (4 * TOKEN_CHARS + 8) + 8 * n_snaps + 64 * 1024),
             "summary.json": (SUMMARY_BASE + heads * (SUMMARY_PER_HEAD + SUMMARY_PER_HEAD_TOKEN * t)
                              + SUMMARY_PER_NEW_TOKEN * generated)}
    if m.n_layers:
        parts["model.npz"] = FLOAT32_BYTES * gpt_parameters(cfg, vocab_size, t) + 64 * 1024
    if cfg.logging.tensorboard:
        parts["tensorboard"] = (TENSORBOARD_STEP_BYTES * steps
                                + (TENSORBOARD_IMAGE_BYTES * n_snaps if cfg.logging.images else 0))
    return parts


def resources(cfg: DictConfig, seq_len: int, vocab_size: int, run_dir: Path | None = None) -> None:
    """ConfigError naming the key that makes it large, before anything is built, when the run needs more
    memory or threads than the machine has, draws or prints more than the limits above, or (into ``run_dir``)
    writes a file past its readers' limit (:mod:`attnlab.core.files`), a report page past its budget or
    more than the free disk."""
    need = memory_estimate(cfg, seq_len, vocab_size)
    available = available_memory()
    if available is not None and sum(need.values()) > available:
        key = ("model.n_layers" if max(need, key=need.get) == "parameters" else "train.batch_size"
               if cfg.model.n_layers else "model.d_model" if need["token_embedding"] >= need["activations"]
               else "text_file" if cfg.get("text_file") else "sentence")
        value = f"{seq_len} tokens" if key == "sentence" else OmegaConf.select(cfg, key)
        parts = ", ".join(f"{name} {_size(n)}" for name, n in need.items() if n)
        raise ConfigError(key, value, _("the run needs about {size} of memory ({parts}), more than the {available} "
                                        "available").format(size=_size(sum(need.values())), parts=parts,
                                                            available=_size(available)))
    cpus = os.cpu_count() or 1
    if isinstance(cfg.get("threads"), int) and cfg.threads > THREADS_PER_CPU * cpus:
        raise ConfigError("threads", cfg.threads, _("more than {n} per CPU of this machine's {cpus}").format(
            n=THREADS_PER_CPU, cpus=cpus))
    if plain(cfg.task) != "train":
        return
    h, n_snaps, lg, layers = cfg.model.n_heads, len(snapshot_steps(cfg.train)), cfg.logging, cfg.model.n_layers
    drawn = n_snaps * (h + (h > 1) + layers) * (lg.figures + (lg.tensorboard and lg.images))  # heads, mean, blocks
    for amount, limit, what in (
            (drawn, MAX_HEATMAPS, N_("about {amount:,} heatmaps to draw (figures and TensorBoard images), more "
                                     "than {limit:,}: fewer heads or snapshots, or logging.figures=false "
                                     "logging.images=false")),
            (24 * h * lg.console, MAX_CONSOLE_LINE, N_("about {amount:,} characters in each snapshot's console line, "
                                                       "more than {limit:,}: fewer heads, or logging.console=false"))):
        if amount > limit:
            raise ConfigError("model.n_heads", h, _(what).format(amount=amount, limit=limit))
    if run_dir is None:
        return
    disk, t = disk_estimate(cfg, seq_len, vocab_size), recorded_window(cfg, seq_len)
    for file, limit, key, value in (("metrics.csv", METRICS_LIMIT, "train.steps", cfg.train.steps),
                                    ("attention.npz", NPZ_LIMIT, "train.snapshot_steps",
                                     f"{n_snaps} snapshots of {h} head(s) x {t} x {t} tokens"
                                     + (f" x {1 + layers} layers" if layers else "")),
                                    ("model.npz", NPZ_LIMIT, "model.n_layers", layers),
                                    ("summary.json", SUMMARY_LIMIT, "model.n_heads", h)):
        if disk.get(file, 0) > limit:
            raise ConfigError(key, value, _("the run's {file} would be about {size}, more than the {limit} "
                                            "attnlab's readers accept").format(file=file, size=_size(disk[file]),
                                                                               limit=_size(limit)))
    page = 2 * files.page_frame_bytes(h * (1 + layers), t)  # the first and last snapshots: a page always shows them
    if lg.report and page > files.PAGE_WEIGHT_BUDGET:
        raise ConfigError("logging.report", True, _(
            "the run's report.html would hold about {size} of attention weights (two snapshots of {n} heads x {t} x "
            "{t} tokens), more than the {limit} a page holds: logging.report=false, a shorter text or fewer heads"
        ).format(size=_size(page), n=h * (1 + layers), t=t, limit=_size(files.PAGE_WEIGHT_BUDGET)))
    existing = next(p for p in (Path(run_dir), *Path(run_dir).parents) if p.exists())
    free = shutil.disk_usage(existing).free
    if sum(disk.values()) > free:
        key = "train.steps" if disk["metrics.csv"] >= disk["attention.npz"] else "train.snapshot_steps"
        parts = ", ".join(f"{name} {_size(n)}" for name, n in disk.items())
        raise ConfigError(key, OmegaConf.select(cfg, key), _(
            "the run would write about {size} ({parts}), more than the {free} free on the disk of {path}").format(
            size=_size(sum(disk.values())), parts=parts, free=_size(free), path=existing))
