"""Tutorial §5, the toy training run: build the model, then forward → loss → backward → step.

Entry point for notebooks: :func:`train` takes a composed config and returns a
:class:`~attnlab.core.records.RunResult` with every loss and snapshot; it writes nothing unless
sinks are given, and never touches the working directory.
"""
from __future__ import annotations

import dataclasses
import functools
import sys
import threading
import time
from pathlib import Path
from typing import Iterable

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from attnlab.core import checks, interrupts, optim, threads, tokenizer
from attnlab.core.config import optimizer_schema, plain, resolve, snapshot_steps
from attnlab.core.errors import as_write_error, describe
from attnlab.core.model import (
    AttentionModel,
    ModelSpec,
    build_section5,
    build_walkthrough,
    mse,
    next_token_cross_entropy,
    next_token_targets,
)
from attnlab.core.records import RunInfo, RunResult, Sink, Snapshot

FLUSH_EVERY = 256  # steps between loss batches sent to sinks (also at snapshots and the end)
# torch's random generator and thread count are the process's: runs of this process that seed
# and draw from them (a model's parameters, dropout) take turns, so two threads training at
# once (the Python API) each get the numbers of their config run alone
RUN_LOCK = threading.RLock()


def one_at_a_time(function):
    """``function`` holding :data:`RUN_LOCK` (it seeds torch's generator, draws from it, or sets
    torch's threads)."""
    @functools.wraps(function)
    def locked(*args, **kwargs):
        with RUN_LOCK:
            return function(*args, **kwargs)

    return locked


def seed_everything(seed: int) -> None:
    """The one place that seeds: torch's CPU generator (all parameters are created on the CPU)
    and deterministic algorithms on, so the same config gives bitwise-identical runs."""
    torch.manual_seed(seed)
    deterministic_algorithms()


def deterministic_algorithms() -> None:
    """``torch.use_deterministic_algorithms(True)`` without its import of
    ``torch._inductor.config``: that import loads torch's whole compiler stack (about 2 s of CPU
    on the machines of docs/benchmarks.md, more than a tutorial run's training) to set one flag
    that only ``torch.compile`` reads, and attnlab never compiles. The switch itself is the same
    call the public function makes (``torch._C._set_deterministic_algorithms``); when the
    compiler is already loaded (a notebook that compiled something), or another torch lacks
    the private setter, the public function is used."""
    setter = getattr(torch._C, "_set_deterministic_algorithms", None)
    if setter is None or "torch._inductor.config" in sys.modules:
        torch.use_deterministic_algorithms(True)
    else:
        setter(True)


def model_spec(cfg: DictConfig) -> ModelSpec:
    """The ``model.*`` keys as a :class:`~attnlab.core.model.ModelSpec` (``model.out_proj`` resolved
    by :func:`attnlab.core.checks.out_proj`)."""
    m = cfg.model
    return ModelSpec(m.d_model, m.d_k, m.d_v, m.init_std, positional=plain(m.positional) == "learned",
                     n_heads=m.n_heads, causal=m.causal, dropout=m.dropout, qkv_bias=m.qkv_bias,
                     attention=plain(m.attention), out_proj=checks.out_proj(cfg))


@one_at_a_time
def build_model(cfg: DictConfig, tokens: tokenizer.Tokens, order: str = "training") -> AttentionModel:
    """Seed, then create the parameters on the CPU in the tutorial's order (§5 for
    ``order="training"``, with the next-token head when ``train.objective=next_token``; §2–4
    for ``"walkthrough"``; see :mod:`attnlab.core.model` for the order of every parameter); moved to
    ``cfg.device`` afterwards, so every device starts from the same numbers. Sets torch's
    threads first (``threads``, see :mod:`attnlab.core.threads`), before any tensor exists."""
    threads.configure(cfg, tokens.seq_len)
    seed_everything(cfg.seed)
    spec = model_spec(cfg)
    if order == "walkthrough":
        model = build_walkthrough(spec, tokens.vocab_size, tokens.seq_len)
    else:
        next_token = plain(cfg.train.objective) == "next_token"
        model = build_section5(spec, tokens.vocab_size, tokens.seq_len, next_token_head=next_token)
    return model.to(torch.device(cfg.device))


def build_optimizer(opt_cfg: DictConfig, params: Iterable[torch.nn.Parameter]) -> optim.Adam | optim.SGD:
    """The ``optimizer`` group over ``params``: torch's Adam, AdamW or SGD update
    (:mod:`attnlab.core.optim`: torch.optim's own update functions, bit for bit the classes' numbers,
    without the 2-s compiler import the classes bring). The class comes from the shipped
    allow-list (:func:`attnlab.core.config.optimizer_schema`), the keyword arguments are the schema's
    plain numbers (checked by :func:`attnlab.core.checks.validate`). Nothing is instantiated from the
    config itself, so a ``_target_`` hidden anywhere in it is never called. Raises ConfigError
    for any other class."""
    schema = optimizer_schema(opt_cfg.get("_target_"))
    kwargs = {k: v for k, v in OmegaConf.to_container(opt_cfg, resolve=True).items() if k != "_target_"}
    if "betas" in kwargs:
        kwargs["betas"] = tuple(kwargs["betas"])
    name = schema._target_.rsplit(".", 1)[1]
    if name == "AdamW":
        kwargs["decoupled_weight_decay"] = True
    return optim.OPTIMIZERS[name](params, **kwargs)


class LossRecorder:
    """The loop's loss bookkeeping: keeps each step's loss as a tensor (no ``.item()`` sync per
    step) and sends them to the sinks in batches of consecutive steps, stopping at the first
    non-finite loss. Memory is one batch, whatever ``train.steps`` is (plus every loss when
    ``keep``).

    ``recorded`` steps were sent (when a sink fails on a batch, the batch counts if the first
    sink, the run's own record, took it: other sinks hold at most those steps); ``final_loss``
    is the last of them; ``steps_to_threshold`` the
    first step whose loss is below ``threshold``; ``diverged_at`` / ``bad_value`` the first
    step whose loss was not finite, and that value.
    """

    def __init__(self, sinks: list[Sink], threshold: float, keep: bool = True) -> None:
        self.sinks = sinks
        self.threshold = threshold
        self.recorded = 0
        self.final_loss: float | None = None
        self.steps_to_threshold: int | None = None
        self.diverged_at: int | None = None
        self.bad_value: float | None = None
        self._pending: list[torch.Tensor] = []
        self._kept: list[np.ndarray] | None = [] if keep else None

    def append(self, loss: torch.Tensor) -> None:
        """Record one step's loss (a scalar tensor, detached here)."""
        self._pending.append(loss.detach())

    def flush(self) -> bool:
        """Send the pending losses to the sinks; False (and nothing after it sent) at the first
        non-finite one."""
        if not self._pending:
            return self.diverged_at is None
        batch = torch.stack(self._pending).to("cpu", torch.float64).numpy()
        self._pending.clear()
        bad = np.flatnonzero(~np.isfinite(batch))
        if bad.size:
            self.diverged_at, self.bad_value = self.recorded + int(bad[0]), float(batch[bad[0]])
            batch = batch[: bad[0]]
        if batch.size:
            steps = np.arange(self.recorded, self.recorded + batch.size, dtype=np.int64)
            for i, sink in enumerate(self.sinks):
                try:
                    sink.on_losses(steps, batch)
                except Exception:
                    if i:  # the first sink (the run's own record, metrics.csv) took the batch: it is recorded
                        self._record(batch)
                    raise
            self._record(batch)
        return not bad.size

    def _record(self, batch: np.ndarray) -> None:
        below = np.flatnonzero(batch < self.threshold)
        if self.steps_to_threshold is None and below.size:
            self.steps_to_threshold = self.recorded + int(below[0])
        if self._kept is not None:
            self._kept.append(batch)
        self.recorded += batch.size
        self.final_loss = float(batch[-1])

    @property
    def losses(self) -> np.ndarray:
        """Every recorded loss, ``(recorded,)`` float64 (empty unless ``keep``)."""
        return np.concatenate(self._kept) if self._kept else np.zeros(0)


@one_at_a_time
def train(cfg: DictConfig, sinks: Iterable[Sink] = (), run_dir: Path | None = None,
          keep_snapshots: bool = True, keep_losses: bool = True) -> RunResult:
    """Run tutorial §5's training as ``cfg`` says and send records to ``sinks``.

    Returns a RunResult: ``status`` completed, diverged (a non-finite loss; records kept up to
    the step before it), interrupted (Ctrl-C / SIGTERM, see :mod:`attnlab.core.interrupts`; records
    kept up to the last finished step) or failed (a sink or torch raised; re-raised after the
    sinks have ended). ``losses`` (steps_run,) float64 when ``keep_losses``, ``snapshots`` when
    ``keep_snapshots``. Raises ConfigError / TokenizerError before any step when the config is bad,
    and KeyboardInterrupt before any sink starts when a deferred Ctrl-C / SIGTERM arrived while
    the model was built (torch's import included).
    """
    sinks = list(sinks)
    checks.validate(cfg)
    tokens = tokenizer.tokenize(cfg)  # §1
    checks.resources(cfg, tokens.seq_len, tokens.vocab_size, run_dir)

    # §2–4: the parameters, in the tutorial's §5 order
    model = build_model(cfg, tokens, order="training")
    attention, head = model.attention, model.next_token_head
    ids = torch.tensor(tokens.token_ids, device=next(attention.parameters()).device)  # (T,)
    X = model.embedding(ids).detach()  # (T, d_model), not trained
    target = next_token_targets(X)  # (T, d_model): row i is X[i+1] (§5's objective, mse)
    optimizer = build_optimizer(cfg.optimizer, model.trained_parameters())
    model.train()  # attention dropout, when model.dropout > 0, in training only

    steps = cfg.train.steps
    snapshots = snapshot_steps(cfg.train)
    is_snapshot = set(snapshots).__contains__
    info = RunInfo(config=resolve(cfg), token_ids=tokens.token_ids, tokens=tokens.labels,
                   snapshot_steps=snapshots, steps=steps, focus_token=cfg.train.focus_token, run_dir=run_dir)
    # a Ctrl-C / SIGTERM while torch loaded and the model was built: stopped before the sinks
    # start, as a job says "interrupted before the training steps" (not "at step 0")
    interrupts.pause_point("model_built")  # a test hook
    interrupts.check()
    for sink in sinks:
        sink.on_start(info)
    recorder = LossRecorder(sinks, cfg.train.loss_threshold, keep=keep_losses)
    kept: list[Snapshot] = []
    status, error, step, overflow = "completed", None, 0, None
    t0 = time.perf_counter()
    with interrupts.deferred(), interrupts.interruptible():
        try:
            for step in range(steps):
                interrupts.check()  # Ctrl-C / SIGTERM during the previous step: stop here
                # forward: Q, K, V → scaled scores → softmax weights → Z (§4)
                snapshot_now = is_snapshot(step)
                out = attention(X, need_weights=snapshot_now)  # Z (T, d_model); weights (H, T, T) or None
                loss = mse(out.Z, target) if head is None else next_token_cross_entropy(head(out.Z), ids)
                # backward and update (§5's four steps)
                optimizer.zero_grad()
                loss.backward()
                try:
                    optimizer.step()
                except RuntimeError as err:  # torch refuses an update it cannot represent: a divergence
                    if "overflow" not in str(err):
                        raise
                    overflow = f"the update after step {step} overflowed ({err}; optimizer.lr={cfg.optimizer.lr})"
                # record
                recorder.append(loss)
                if snapshot_now:
                    if not recorder.flush():
                        break
                    snap = Snapshot(step, recorder.final_loss, out.weights.detach().cpu().numpy().astype(np.float32))
                    for sink in sinks:
                        sink.on_snapshot(snap)
                    if keep_snapshots:
                        kept.append(snap)
                elif ((step + 1) % FLUSH_EVERY == 0 or overflow) and not recorder.flush():
                    break
                if overflow:
                    break
            else:
                recorder.flush()
        except KeyboardInterrupt:
            recorder.flush()  # the steps that finished before the interrupt
            n = recorder.recorded
            status, error = "interrupted", f"interrupted at step {step}; {n} step{'s' if n != 1 else ''} recorded"
        except Exception as err:
            failure = as_write_error(err, recorder.recorded)  # a file that could not be written: at this step
            try:
                _finish(sinks, _result(info, recorder, kept, t0, "failed", describe(failure)))
            except Exception:  # a sink failing again as it ends: the first failure is the run's
                pass
            if failure is err:
                raise
            raise failure from err
    if recorder.diverged_at is not None:
        status, error = "diverged", divergence_message(cfg, recorder.diverged_at, recorder.bad_value)
    elif overflow is not None:
        status, error = "diverged", overflow
    result = _result(info, recorder, kept, t0, status, error)
    _finish(sinks, result)
    return result


def divergence_message(cfg: DictConfig, step: int, value: float | None) -> str:
    """One line saying where the loss stopped being finite and the likely cause: the initial
    values when it already happens at step 0 (before any update), else the learning rate."""
    if step == 0:
        return (f"loss became {value} at step 0, before any update: the initial values overflow "
                f"(model.init_std={cfg.model.init_std}); try a smaller model.init_std")
    return f"loss became {value} at step {step} (optimizer.lr={cfg.optimizer.lr}); try a smaller optimizer.lr"


def _result(info: RunInfo, recorder: LossRecorder, kept: list[Snapshot], t0: float, status: str,
            error: str | None) -> RunResult:
    return RunResult(status=status, steps_run=recorder.recorded, final_loss=recorder.final_loss,
                     wall_time_s=time.perf_counter() - t0, error=error,
                     steps_to_threshold=recorder.steps_to_threshold, token_ids=info.token_ids,
                     tokens=info.tokens, losses=recorder.losses, snapshots=kept)


def _finish(sinks: list[Sink], result: RunResult) -> None:
    """``on_end`` then ``close`` on each sink in turn, shielded from a second Ctrl-C
    (:func:`attnlab.core.interrupts.shielded`); a sink that fails does not stop the others, and the
    sinks after it end the run as ``failed`` with that reason (so the status they record
    agrees with summary.json, which ``job.run_job`` rewrites). Re-raises the first failure."""
    errors = []

    def call(method, *args) -> None:
        nonlocal result
        try:
            method(*args)
        except Exception as err:  # keep the other sinks' records
            errors.append(err)
            if result.status != "failed":
                result = dataclasses.replace(result, status="failed", error=describe(err))

    with interrupts.shielded():
        for sink in sinks:  # what TensorBoard's thread still holds, written while the disk reserve is held
            call(sink.flush)
        for sink in sinks:
            call(sink.on_end, result)
            call(sink.close)
    if errors:
        raise errors[0]
