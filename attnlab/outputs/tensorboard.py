"""TensorBoard sink: scalars, attention heatmaps, hparams and text, written straight into the
run dir so ``tensorboard --logdir outputs`` lists one run per run folder (DESIGN.md).

What is written (tags):

- ``loss`` (scalar, every step; float32 in the event file, full precision is in metrics.csv)
- ``attention/focus/<pos>_<tok>`` (scalar, each snapshot step): the weight the focus token
  (``train.focus_token``) gives to the token at ``pos``; ``attention/entropy/<pos>_<tok>``:
  entropy of row ``pos`` in nats (``ln T`` = uniform, 0 = all on one token)
- ``focus/weight`` (scalar, each snapshot step): the focus token's weight on its strongest key
  (attnlab.core.focus); with several heads also ``focus/weight/head_<h>`` and each head's row
  entropies ``attention/entropy/head_<h>/<pos>_<tok>`` (the tags above are the head mean)
- ``attention/weights`` (image, each snapshot step, only with ``images=True``): the heatmap (the
  head mean); with several heads also ``attention/weights/head_<h>``, one tag per head
- ``hparam/final_loss``, ``hparam/steps_to_threshold`` (scalars at the last step; -1 when the
  loss never fell below ``train.loss_threshold``), ``hparam/focus_step`` (the first snapshot
  step whose focus weight passed 0.9; -1 when none did) and the hparams-plugin session (flattened
  config + ``status`` + ``error``, the one-line reason, empty for a completed run), written at
  ``on_end``
- ``run/sentence``, ``run/tokens``, ``run/config`` (text, step 0; TensorBoard lists them as
  ``run/sentence/text_summary`` ..., the suffix torch's ``add_text`` adds)

Heatmap images are drawn in-process at each snapshot (:func:`heatmap_pixels`, ~0.1 s each).
``torch.utils.tensorboard`` is imported only when a sink is created.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from attnlab.core.focus import FOCUS_THRESHOLD, focus, row_entropy
from attnlab.core.records import RunInfo, RunResult, Sink, Snapshot, head_mean
from attnlab.outputs.fonts import drawable, label, rc
from attnlab.outputs.plots import draw_heatmap, new_figure

HEATMAP_IN = (4.6, 4.0)  # inches of one TensorBoard heatmap (460 x 400 px)

_SESSION_STATUS = {"completed": "STATUS_SUCCESS", "diverged": "STATUS_FAILURE",
                   "failed": "STATUS_FAILURE", "interrupted": "STATUS_FAILURE"}


def tag_names(tokens: list[str]) -> list[str]:
    """Tag-safe, unique suffixes ``<pos>_<token>``: ``[0-9A-Za-z_.-]``, other Unicode letters
    and digits, and symbols such as emoji (Unicode category So) kept, each run of anything
    else -> ``_``, e.g. ``[" with", "$", "旅(1/2)", " 🚶(1/3)"]`` ->
    ``["0_with", "1__", "2_旅_1_2", "3_🚶_1_3"]`` (token labels: ``tokenizer.token_labels``)."""
    import unicodedata

    out = []
    for pos, tok in enumerate(tokens):
        marked = "".join(ch if ch.isalnum() or ch in "_.-" or unicodedata.category(ch) == "So" else "\0"
                         for ch in tok.strip())
        safe = re.sub("\0+", "_", marked).strip("_") or "_"
        out.append(f"{pos}_{safe}")
    return out


def flatten_config(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested config -> ``{"model.d_model": 6, ...}`` with hparams-plugin-friendly values:
    numbers and strings kept, bools as ``"true"``/``"false"``, lists as strings, None as
    ``"none"``."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten_config(value, f"{name}."))
        elif value is None:
            flat[name] = "none"
        elif isinstance(value, bool):
            flat[name] = "true" if value else "false"
        elif isinstance(value, (int, float, str)):
            flat[name] = value
        else:
            flat[name] = str(list(value) if isinstance(value, (tuple, list)) else value)
    return flat


def token_markdown(token_ids: list[int], tokens: list[str]) -> str:
    """Markdown table: position, id, token (repr, so leading spaces show)."""
    rows = ["| position | id | token |", "| ---: | ---: | --- |"]
    for pos, (tid, tok) in enumerate(zip(token_ids, tokens)):
        cell = repr(tok).replace("|", "\\|")
        rows.append(f"| {pos} | {tid} | `{cell}` |")
    return "\n".join(rows)


class TensorBoardSink(Sink):
    """Writes one run's TensorBoard events into ``run_dir`` (see the module docstring).

    ``images=False`` skips the heatmap images (the slowest part: ~0.1 s per snapshot).
    Safe to end at any point: ``on_end`` without ``on_start`` or without losses still writes
    the hparams session with its status; ``close`` flushes and closes the event file (the file
    is created at the first record, so a sink closed before any record writes nothing).
    """

    def __init__(self, run_dir: Path, images: bool = True):
        from torch.utils.tensorboard import SummaryWriter  # fails here if tensorboard is missing

        self._writer_class = SummaryWriter
        self._writer = None
        self.run_dir = Path(run_dir)
        self.images = images
        self.info: RunInfo | None = None
        self._names: list[str] = []
        self._last_step = 0
        self._focus_step: int | None = None  # the first snapshot step whose mean focus weight passed 0.9

    @property
    def writer(self):
        """The ``SummaryWriter``, created on first use: a run refused before ``on_start``
        (bad config) that never reaches ``on_end`` leaves no empty event file behind."""
        if self._writer is None:
            self._writer = self._writer_class(log_dir=str(self.run_dir))
        return self._writer

    def on_start(self, info: RunInfo) -> None:
        from omegaconf import OmegaConf

        self.info = info
        self._names = tag_names(info.tokens)
        w = self.writer
        w.add_text("run/sentence", str(info.config.get("sentence", "")), 0)
        w.add_text("run/tokens", token_markdown(info.token_ids, info.tokens), 0)
        w.add_text("run/config", "```yaml\n" + OmegaConf.to_yaml(info.config) + "```", 0)

    def on_losses(self, steps: np.ndarray, losses: np.ndarray) -> None:
        for step, loss in zip(np.asarray(steps).tolist(), np.asarray(losses).tolist()):
            self.writer.add_scalar("loss", loss, step)
        if len(steps):
            self._last_step = int(steps[-1])

    def on_snapshot(self, snapshot: Snapshot) -> None:
        heads = np.asarray(snapshot.weights)  # (H, T, T)
        w = head_mean(heads)  # (T, T): the one picture (H = 1: the head itself)
        step = snapshot.step
        names = self._names or tag_names([str(i) for i in range(w.shape[0])])
        query = self.info.focus_token if self.info else 0
        for name, value in zip(names, w[query]):
            self.writer.add_scalar(f"attention/focus/{name}", value, step)
        for name, value in zip(names, row_entropy(w)):
            self.writer.add_scalar(f"attention/entropy/{name}", value, step)
        strongest = focus(np.concatenate([heads, w[None]]), query).weight  # (H + 1,): each head, then the mean
        self.writer.add_scalar("focus/weight", strongest[-1], step)
        if self._focus_step is None and strongest[-1] > FOCUS_THRESHOLD:
            self._focus_step = step
        many = len(heads) > 1
        if many:
            for h, head in enumerate(heads):
                self.writer.add_scalar(f"focus/weight/head_{h}", strongest[h], step)
                for name, value in zip(names, row_entropy(head)):
                    self.writer.add_scalar(f"attention/entropy/head_{h}/{name}", value, step)
        if self.images:
            title = f"step={step}  loss={snapshot.loss:.4f}"
            tokens = self.info.tokens if self.info else names
            mean = heatmap_pixels(tokens, w, title + ("  (mean of heads)" if many else ""))
            self.writer.add_image("attention/weights", mean, step, dataformats="HWC")
            for h, head in enumerate(heads if many else []):
                pixels = heatmap_pixels(tokens, head, f"{title}  head {h}")
                self.writer.add_image(f"attention/weights/head_{h}", pixels, step, dataformats="HWC")

    def flush(self) -> None:
        """Have TensorBoard's writer thread put every event queued so far in the event file."""
        if self._writer is not None:
            self._writer.flush()

    def on_end(self, result: RunResult) -> None:
        from tensorboard.plugins.hparams import plugin_data_pb2
        from torch.utils.tensorboard.summary import hparams

        config = self.info.config if self.info else {}
        hp = flatten_config(config)
        hp["status"] = result.status
        hp["error"] = result.error or ""  # the one-line reason of a run that did not complete
        reached = result.steps_to_threshold
        final = result.final_loss
        metrics = {
            "hparam/final_loss": float("nan") if final is None else float(final),
            "hparam/steps_to_threshold": -1 if reached is None else reached,
            "hparam/focus_step": -1 if self._focus_step is None else self._focus_step,
        }
        step = max(self._last_step, result.steps_run - 1, 0)
        exp, ssi, sei = hparams(hp, metrics)
        # torch always writes STATUS_SUCCESS; record the run's real status instead
        plugin = sei.value[0].metadata.plugin_data
        data = plugin_data_pb2.HParamsPluginData.FromString(plugin.content)
        data.session_end_info.status = _SESSION_STATUS.get(result.status, "STATUS_UNKNOWN")
        plugin.content = data.SerializeToString()
        for summary in (exp, ssi, sei):
            self.writer.file_writer.add_summary(summary, step)
        for tag, value in metrics.items():
            self.writer.add_scalar(tag, value, step)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.flush()
            self._writer.close()


def heatmap_pixels(tokens: Sequence[str], weights: np.ndarray, title: str = "") -> np.ndarray:
    """The heatmap TensorBoard shows for ``weights`` ((T, T) or (1, T, T)) over ``tokens``:
    ``(400, 460, 3)`` uint8 RGB (HWC), colour scale fixed to [0, 1] so steps compare."""
    import matplotlib

    with matplotlib.rc_context(rc()):
        fig = new_figure(*HEATMAP_IN)
        ax = fig.add_subplot()
        im = draw_heatmap(ax, head_mean(weights), [label(t) for t in tokens], drawable(title))
        fig.colorbar(im, ax=ax, shrink=0.85)
        fig.canvas.draw()
        return np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
