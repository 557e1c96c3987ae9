"""Tutorial §5, the toy training run: build the model, then forward → loss → backward → step.
:func:`train` returns a :class:`~attnlab.core.records.RunResult`; it writes nothing (sinks do)."""
from __future__ import annotations

import contextlib
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

from attnlab.core import checks, generate, interrupts, optim, threads, tokenizer
from attnlab.core.config import optimizer_schema, plain, resolve, snapshot_steps
from attnlab.core.errors import as_write_error, describe
from attnlab.core.i18n import _
from attnlab.core.model import GPT, AttentionModel, ModelSpec, mse, next_token_cross_entropy, next_token_targets
from attnlab.core.records import RunInfo, RunResult, Sink, Snapshot

FLUSH_EVERY = 256  # steps between loss batches sent to sinks (also at snapshots and the end)
# torch's generator and thread count belong to the process: runs in two threads take turns
RUN_LOCK = threading.RLock()
DETERMINISTIC_SETTER = "_set_deterministic_algorithms"  # torch._C's, what the public function calls


def one_at_a_time(function):
    """``function`` holding :data:`RUN_LOCK` (it seeds torch, draws from it or sets its threads)."""
    @functools.wraps(function)
    def locked(*args, **kwargs):
        with RUN_LOCK:
            return function(*args, **kwargs)

    return locked


def deterministic_algorithms() -> None:
    """Deterministic algorithms on, through the setter the public function calls when this torch has it:
    the public function imports ``torch._inductor.config`` (seconds of CPU)."""
    setter = getattr(torch._C, DETERMINISTIC_SETTER, None)
    if setter is None or "torch._inductor.config" in sys.modules:
        torch.use_deterministic_algorithms(True)
    else:
        setter(True)


def model_spec(cfg: DictConfig) -> ModelSpec:
    m = cfg.model
    return ModelSpec(m.d_model, m.d_k, m.d_v, m.init_std, positional=plain(m.positional) == "learned",
                     n_heads=m.n_heads, causal=m.causal, dropout=m.dropout, qkv_bias=m.qkv_bias,
                     attention=plain(m.attention), out_proj=checks.out_proj(cfg), n_layers=m.n_layers, d_ff=m.d_ff)


@one_at_a_time
def build_model(cfg: DictConfig, tokens: tokenizer.Tokens, order: str = "training") -> AttentionModel | GPT:
    """Set torch's threads, seed, make the parameters on the CPU in §5's order (``"training"``),
    §2–4's (``"walkthrough"``) or the GPT's (model.n_layers >= 1), then move them to ``cfg.device``."""
    seq_len = checks.recorded_window(cfg, tokens.seq_len)
    spec = model_spec(cfg)
    head = spec.n_layers > 0 or (order == "training" and plain(cfg.train.objective) == "next_token")
    threads.configure(cfg, seq_len, tokens.vocab_size if head else 0, spec.out_proj)  # the whole step counted
    torch.manual_seed(cfg.seed)
    deterministic_algorithms()
    model = GPT(spec, tokens.vocab_size, seq_len) if spec.n_layers else AttentionModel(
        spec, tokens.vocab_size, tokens.seq_len, order, next_token_head=head)
    return model.to(torch.device(cfg.device))


def build_optimizer(opt_cfg: DictConfig, params: Iterable[torch.nn.Parameter]):
    """The ``optimizer`` group over ``params``, from the shipped allow-list (ConfigError otherwise)."""
    name = optimizer_schema(opt_cfg.get("_target_"))._target_.rsplit(".", 1)[1]
    kwargs = {k: v for k, v in OmegaConf.to_container(opt_cfg, resolve=True).items() if k != "_target_"}
    return optim.build(name, params, **kwargs)


class LossRecorder:
    """Each step's loss kept as a tensor (no ``.item()`` sync per step), sent to the sinks in batches up
    to the first non-finite loss (``diverged_at``, ``bad_value``). ``recorded`` steps were sent (a batch a
    later sink fails on counts: the first sink took it); ``losses`` (recorded,) float64."""

    def __init__(self, sinks: list[Sink], threshold: float, keep: bool = True) -> None:
        self.sinks, self.threshold = sinks, threshold
        self.recorded = 0
        self.final_loss: float | None = None
        self.steps_to_threshold: int | None = None
        self.diverged_at: int | None = None
        self.bad_value: float | None = None
        self._pending: list[torch.Tensor] = []
        self._kept: list[np.ndarray] | None = [] if keep else None

    def append(self, loss: torch.Tensor) -> None:
        self._pending.append(loss.detach())

    def flush(self) -> bool:
        """Send the pending losses; False (nothing from it on sent) at the first non-finite one."""
        if not self._pending:
            return self.diverged_at is None
        batch = torch.stack(self._pending).to("cpu", torch.float64).numpy()  # (n,)
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
                    if i:
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
        return np.concatenate(self._kept) if self._kept else np.zeros(0)


@one_at_a_time
def train(cfg: DictConfig, sinks: Iterable[Sink] = (), run_dir: Path | None = None,
          keep_snapshots: bool = True, keep_losses: bool = True, tokens: tokenizer.Tokens | None = None) -> RunResult:
    """Tutorial §5's training as ``cfg`` says, records sent to ``sinks`` in order; ``tokens``: the caller's
    :func:`checks.validated_tokens` of ``cfg`` (None: made here). ``status``: completed; diverged (a
    non-finite loss or update, kept up to the step before); interrupted (KeyboardInterrupt between steps);
    failed (re-raised, an OSError as WriteError, after every sink ended). ConfigError / TokenizerError
    before any sink starts."""
    sinks = list(sinks)
    # build: text → ids (§1), parameters in §5's order (§2–4), the optimizer
    tokens = tokens or checks.validated_tokens(cfg)
    checks.resources(cfg, tokens.seq_len, tokens.vocab_size, run_dir)
    model = build_model(cfg, tokens)
    ids = torch.tensor(tokens.token_ids, device=next(model.parameters()).device)  # (T,)
    forward, recorded = (_gpt_forward if cfg.model.n_layers else _tutorial_forward)(model, ids, cfg)
    optimizer = build_optimizer(cfg.optimizer, model.trained_parameters())
    model.train()  # attention dropout, when model.dropout > 0
    snapshots = snapshot_steps(cfg.train)
    is_snapshot = set(snapshots).__contains__
    config = resolve(cfg)
    config["train"]["focus_token"] = tokens.focus  # the position the run used, whatever named it
    info = RunInfo(config=config, token_ids=tokens.token_ids[:recorded], tokens=tokens.labels[:recorded],
                   snapshot_steps=snapshots, steps=cfg.train.steps, focus_token=tokens.focus, run_dir=run_dir)
    interrupts.pause_point("model_built")  # a test hook
    interrupts.check()  # a deferred Ctrl-C while torch loaded: stop before any sink starts
    recorder = LossRecorder(sinks, cfg.train.loss_threshold, keep=keep_losses)
    kept: list[Snapshot] = []
    status, error, step, overflow = "completed", None, 0, None
    t0 = time.perf_counter()
    with interrupts.interruptible():
        try:
            for sink in sinks:  # inside the try: a sink failing to start still ends every sink started
                sink.on_start(info)
            for step in range(cfg.train.steps):
                interrupts.check()  # a signal during the previous step: stop here
                snapshot_now = is_snapshot(step)
                # forward and loss (§4–5); at snapshot steps the weights too, as Snapshot fields
                loss, record = forward(snapshot_now)
                # backward and step (§5): zero_grad → backward → step
                optimizer.zero_grad()
                loss.backward()
                try:
                    optimizer.step()
                except RuntimeError as err:  # an update torch cannot represent: a divergence
                    if "overflow" not in str(err):
                        raise
                    overflow = f"the update after step {step} overflowed ({err}; optimizer.lr={cfg.optimizer.lr})"
                # record: the loss; at snapshot steps the weights, after the losses up to them
                recorder.append(loss)
                if (snapshot_now or overflow or (step + 1) % FLUSH_EVERY == 0) and not recorder.flush():
                    break  # a non-finite loss
                if snapshot_now:
                    snap = Snapshot(step, recorder.final_loss, **record)
                    for sink in sinks:
                        sink.on_snapshot(snap)
                    if keep_snapshots:
                        kept.append(snap)
                if overflow:
                    break
            recorder.flush()  # the last batch (nothing left after a break)
        except KeyboardInterrupt:
            recorder.flush()  # the steps that finished before it
            n = recorder.recorded
            status, error = "interrupted", f"interrupted at step {step}; {n} step{'s' if n != 1 else ''} recorded"
        except Exception as err:
            failure = as_write_error(err, recorder.recorded)
            with contextlib.suppress(Exception):  # a sink failing again as it ends: the first failure is the run's
                _finish(sinks, _result(recorder, info, kept, t0, "failed", describe(failure)))
            if failure is err:
                raise
            raise failure from err
    if recorder.diverged_at is not None:
        status, error = "diverged", divergence_message(cfg, recorder.diverged_at, recorder.bad_value)
    elif overflow is not None:
        status, error = "diverged", overflow
    result = _result(recorder, info, kept, t0, status, error)
    if cfg.model.n_layers:
        result.parameters = {k: _numpy(v) for k, v in model.stacked_state().items()}
    if cfg.analysis.prompt is not None and status == "completed":
        result.generation = generate.continuation(model, cfg)
    _finish(sinks, result)
    return result


def _numpy(weights: torch.Tensor) -> np.ndarray:
    return weights.detach().cpu().numpy().astype(np.float32)


def _tutorial_forward(model: AttentionModel, ids: torch.Tensor, cfg: DictConfig):
    """§5's step on the whole text, (forward(need_weights) → (loss, Snapshot fields), T recorded)."""
    attention, head = model.attention, model.next_token_head
    X = model.embedding(ids).detach()  # (T, d_model), not trained
    target = next_token_targets(X)  # (T, d_model): row i is X[i+1]

    def forward(need_weights: bool):
        # forward (§4): Q, K, V = X W; weights = softmax(Q Kᵀ / √d_k); Z = weights V
        out = attention(X, need_weights=need_weights)  # Z (T, d_model); weights (H, T, T) or None
        # loss (§5): mean((Z - target)²), or next-token cross-entropy through the head
        loss = mse(out.Z, target) if head is None else next_token_cross_entropy(head(out.Z), ids)
        return loss, {"weights": _numpy(out.weights)} if need_weights else None

    return forward, ids.shape[0]


def _gpt_forward(model: GPT, ids: torch.Tensor, cfg: DictConfig):
    """A GPT's step on ``train.batch_size`` windows of ``context`` tokens of the text's head at offsets drawn
    from torch's generator (nanoGPT's get_batch), (forward(need_weights) → (loss, Snapshot fields), context).
    Snapshots record the first window and the loss over the held-out tail in windows of at most ``context``."""
    n_train, context = checks.corpus_split(cfg, ids.shape[0])
    train_ids, val_ids = ids[:n_train], ids[n_train:]  # (N,), (M,)
    offsets = torch.arange(context, device=ids.device)  # (context,)
    n = min(context, val_ids.shape[0])
    val_windows = val_ids[: val_ids.shape[0] // n * n].view(-1, n) if n >= 2 else None  # (W, n); no tail: None

    def forward(need_weights: bool):
        record = None
        if need_weights:  # every block's weights on the first window and the validation loss, before the update
            model.eval()
            with torch.no_grad():
                weights = model(train_ids[:context], need_weights=True, head=False)[1]  # L × (H, T, T)
                layers = _numpy(torch.stack(weights))  # (L, H, T, T)
                val_loss = None
                if val_windows is not None:
                    val_loss = next_token_cross_entropy(model(val_windows)[0], val_windows).item()
            record = {"weights": layers[-1], "layers": layers, "val_loss": val_loss}
            model.train()
        starts = torch.randint(0, n_train - context + 1, (cfg.train.batch_size,))
        batch = train_ids[starts.to(ids.device)[:, None] + offsets]  # (B, context)
        logits, _ = model(batch)  # (B, context, vocab_size)
        return next_token_cross_entropy(logits, batch), record

    return forward, context


def divergence_message(cfg: DictConfig, step: int, value: float | None) -> str:
    """Where the loss stopped being finite and the likely cause (init_std at step 0, else lr)."""
    if step == 0:
        return _("loss became {value} at step 0, before any update: the initial values overflow "
                 "(model.init_std={std}); try a smaller model.init_std").format(value=value, std=cfg.model.init_std)
    return _("loss became {value} at step {step} (optimizer.lr={lr}); try a smaller optimizer.lr").format(
        value=value, step=step, lr=cfg.optimizer.lr)


def _result(recorder: LossRecorder, info: RunInfo, kept: list[Snapshot], t0: float, status: str,
            error: str | None) -> RunResult:
    return RunResult(status=status, steps_run=recorder.recorded, final_loss=recorder.final_loss,
                     wall_time_s=time.perf_counter() - t0, error=error,
                     steps_to_threshold=recorder.steps_to_threshold, token_ids=info.token_ids,
                     tokens=info.tokens, losses=recorder.losses, snapshots=kept)


def _finish(sinks: list[Sink], result: RunResult) -> None:
    """``flush`` on every sink, then ``on_end`` and ``close`` on each, shielded; a failing sink does not stop
    the others (those after it see ``failed``). Re-raises the first failure."""
    errors = []

    def call(method, *args) -> None:
        nonlocal result
        try:
            method(*args)
        except Exception as err:
            errors.append(err)
            if result.status != "failed":
                result = dataclasses.replace(result, status="failed", error=describe(err))

    with interrupts.shielded():
        for sink in sinks:
            call(sink.flush)
        for sink in sinks:
            call(sink.on_end, result)
            call(sink.close)
    if errors:
        raise errors[0]
