"""The toy training run of tutorial §5: targets, optimizer from config, the loop, snapshots.

Entry point for notebooks: :func:`train` takes a composed config and returns a
:class:`~attnlab.records.RunResult` with every loss and snapshot; it writes nothing unless
sinks are given, and never touches the working directory.
"""
from __future__ import annotations

import contextlib
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np
import torch
from omegaconf import DictConfig

from attnlab import config as C
from attnlab import tokenizer
from attnlab.model import (GPT2_VOCAB_SIZE, InputEmbedding, ModelSpec, MultiHeadSelfAttention, build_section5,
                           build_walkthrough, mse, next_token_targets)
from attnlab.records import RunInfo, RunResult, Sink, Snapshot

FLUSH_EVERY = 256  # steps between loss batches sent to sinks (also at snapshots and the end)


@dataclass
class Prepared:
    """The tokenized text: ``token_ids`` (T,), readable ``tokens`` (T,), and the vocab size."""

    token_ids: list[int]
    tokens: list[str]
    vocab_size: int


def read_text(cfg: DictConfig) -> str:
    """The text to tokenize: ``text_file`` when set (UTF-8, without the file's final line
    break, which ends the file rather than belonging to the text), else ``sentence``."""
    if not cfg.get("text_file"):
        return cfg.sentence
    try:
        text = Path(cfg.text_file).expanduser().read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) else err.reason
        raise C.ConfigError("text_file", cfg.text_file, f"must be a readable UTF-8 file ({reason})") from None
    return text.removesuffix("\n").removesuffix("\r") if text.endswith("\n") else text


def prepare(cfg: DictConfig) -> Prepared:
    """Validate ``cfg`` and tokenize its text. Raises ConfigError / TokenizerError (one line)."""
    C.validate(cfg)
    enc_name = cfg.tokenizer.encoding
    ids = tokenizer.encode(read_text(cfg), enc_name, C.plain(cfg.tokenizer.special_tokens))
    C.validate_tokens(cfg, len(ids))
    vocab = max(GPT2_VOCAB_SIZE, tokenizer.get_encoding(enc_name).n_vocab)
    return Prepared(ids, tokenizer.token_labels(ids, enc_name), vocab)


def seed_everything(seed: int) -> None:
    """The one place that seeds: torch's CPU generator (all parameters are created on the CPU)
    and deterministic algorithms on, so the same config gives bitwise-identical runs."""
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)


def build_optimizer(opt_cfg: DictConfig, params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """The ``optimizer`` group instantiated by Hydra over ``params``; only the shipped
    torch.optim classes are allowed (raises ConfigError otherwise)."""
    from hydra.utils import instantiate

    C.optimizer_schema(opt_cfg.get("_target_"))
    return instantiate(opt_cfg, params=list(params))


def build_model(cfg: DictConfig, prepared: Prepared, order: str = "training") -> tuple[InputEmbedding, MultiHeadSelfAttention]:
    """Seed, then create the parameters on the CPU in the tutorial's order (§5 for
    ``order="training"``, §2–4 for ``"walkthrough"``); moved to ``cfg.device`` afterwards, so
    every device starts from the same numbers."""
    seed_everything(cfg.seed)
    m = cfg.model
    spec = ModelSpec(m.d_model, m.d_k, m.d_v, m.init_std, positional=C.plain(m.positional) == "learned")
    build = build_walkthrough if order == "walkthrough" else build_section5
    model = build(spec, prepared.vocab_size, len(prepared.token_ids)).to(torch.device(cfg.device))
    return model.embedding, model.attention


def train(cfg: DictConfig, sinks: Iterable[Sink] = (), run_dir: Path | None = None,
          keep_snapshots: bool = True) -> RunResult:
    """Run tutorial §5's training as ``cfg`` says and send records to ``sinks``.

    Returns a RunResult: ``status`` completed, diverged (a non-finite loss; records kept up to
    the step before it) or interrupted (KeyboardInterrupt; records kept up to the last step);
    ``losses`` (steps_run,) float64; ``snapshots`` when ``keep_snapshots``. Raises
    ConfigError / TokenizerError before any step when the config is bad.
    """
    sinks = list(sinks)
    prepared = prepare(cfg)
    embedding, attention = build_model(cfg, prepared, order="training")
    device = next(attention.parameters()).device
    ids = torch.tensor(prepared.token_ids, device=device)
    X = embedding(ids).detach()  # (T, d_model); the embeddings are not trained (§5)
    target = next_token_targets(X)  # (T, d_model)
    optimizer = build_optimizer(cfg.optimizer, attention.parameters())

    steps = cfg.train.steps
    snapshot_steps = sorted(set(cfg.train.snapshot_steps))
    info = RunInfo(config=C.to_plain(cfg), token_ids=prepared.token_ids, tokens=prepared.tokens,
                   snapshot_steps=snapshot_steps, steps=steps, focus_token=cfg.train.focus_token, run_dir=run_dir)
    for sink in sinks:
        sink.on_start(info)

    losses = torch.empty(steps, dtype=torch.float64)
    pending: list[torch.Tensor] = []  # detached losses of the latest steps, not yet copied into `losses`
    kept: list[Snapshot] = []
    state = {"sent": 0, "settled": 0, "status": "completed", "error": None}

    def settle() -> None:
        """Copy the pending losses into ``losses`` (one stack per batch instead of an indexed
        write every step)."""
        if pending:
            n = state["settled"]
            losses[n:n + len(pending)] = torch.stack(pending)
            state["settled"] = n + len(pending)
            pending.clear()

    def flush(upto: int) -> bool:
        """Send losses[sent:upto] to the sinks; False (and stop) at the first non-finite one."""
        settle()
        start = state["sent"]
        if upto <= start:
            return True
        batch = losses[start:upto].numpy()
        bad = np.flatnonzero(~np.isfinite(batch))
        if bad.size:
            upto = start + int(bad[0])
            batch = batch[: bad[0]]
            state["status"] = "diverged"
            state["error"] = f"loss became {losses[upto].item()} at step {upto} (optimizer.lr={cfg.optimizer.lr})"
        if batch.size:
            for sink in sinks:
                sink.on_losses(np.arange(start, upto, dtype=np.int64), batch.copy())
        state["sent"] = upto
        return not bad.size

    snap_set = set(snapshot_steps)
    step = 0
    t0 = time.perf_counter()
    with deferred_interrupts() as stop:
        try:
            for step in range(steps):
                if stop:  # Ctrl-C / SIGTERM arrived during the previous step
                    raise KeyboardInterrupt(f"signal {stop[0]}")
                out = attention(X, need_weights=step in snap_set)  # Z (T, d_model), weights (H, T, T) or None
                loss = mse(out.Z, target)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                pending.append(loss.detach())
                if step in snap_set:
                    if not flush(step + 1):
                        break
                    snap = Snapshot(step, float(losses[step]), out.weights.detach().cpu().numpy().astype(np.float32))
                    for sink in sinks:
                        sink.on_snapshot(snap)
                    if keep_snapshots:
                        kept.append(snap)
                elif (step + 1) % FLUSH_EVERY == 0 and not flush(step + 1):
                    break
            else:
                flush(steps)
        except KeyboardInterrupt:
            flush(step)  # the steps that finished before the interrupt
            state["status"] = "interrupted"
            state["error"] = f"interrupted at step {step}; {state['sent']} steps recorded"
        except Exception as err:
            state["status"] = "failed"
            state["error"] = f"{type(err).__name__}: {err}"
            _finish(sinks, _result(state, losses, kept, time.perf_counter() - t0))
            raise
    result = _result(state, losses, kept, time.perf_counter() - t0)
    _finish(sinks, result)
    return result


@contextlib.contextmanager
def deferred_interrupts():
    """While inside, SIGINT (Ctrl-C) and SIGTERM only append their number to the yielded list;
    the training loop checks it between steps, so a signal never lands halfway through a sink
    writing a batch. A second signal raises KeyboardInterrupt at once (for a stuck step).
    A no-op outside the main thread, where handlers cannot be set."""
    received: list[int] = []

    def handler(signum, frame):
        if received:
            raise KeyboardInterrupt(f"signal {signum}")
        received.append(signum)

    previous = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, handler)
    except ValueError:  # not the main thread
        pass
    try:
        yield received
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _result(state: dict, losses: torch.Tensor, kept: list[Snapshot], wall: float) -> RunResult:
    sent = state["sent"]
    return RunResult(status=state["status"], steps_run=sent, final_loss=float(losses[sent - 1]) if sent else None,
                     wall_time_s=wall, error=state["error"], losses=losses[:sent].numpy().copy(), snapshots=kept)


def _finish(sinks: list[Sink], result: RunResult) -> None:
    """``on_end`` then ``close`` on every sink; a sink that fails does not stop the others."""
    errors = []
    for sink in sinks:
        try:
            sink.on_end(result)
        except Exception as err:  # keep the other sinks' records
            errors.append(err)
    for sink in sinks:
        try:
            sink.close()
        except Exception as err:
            errors.append(err)
    if errors:
        raise errors[0]
