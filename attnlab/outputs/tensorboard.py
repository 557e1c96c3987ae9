"""TensorBoard sink: scalars, attention heatmaps, hparams and text, written straight into the run dir
(``tensorboard --logdir outputs`` lists one run per folder); the tags are docs/reference.md's table.
``torch.utils.tensorboard`` is imported only when a sink is made."""
from __future__ import annotations

import functools
import re
import unicodedata
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import OmegaConf

from attnlab.core.focus import FOCUS_THRESHOLD, focus, row_entropy
from attnlab.core.records import RunInfo, RunResult, Sink, Snapshot, head_mean
from attnlab.outputs.drawing import Drawing
from attnlab.outputs.plots import heatmap_pixels


def tag_names(tokens: list[str]) -> list[str]:
    """Tag-safe, unique suffixes ``<pos>_<token>`` (letters, digits, ``_.-`` and symbols kept, other runs ``_``):
    ``[" with", "$", "旅(1/2)"]`` -> ``["0_with", "1__", "2_旅_1_2"]``."""
    out = []
    for pos, tok in enumerate(tokens):
        marked = "".join(ch if ch.isalnum() or ch in "_.-" or unicodedata.category(ch) == "So" else "\0"
                         for ch in tok.strip())
        safe = re.sub("\0+", "_", marked).strip("_") or "_"
        out.append(f"{pos}_{safe}")
    return out


def flatten_config(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested config -> ``{"model.d_model": 6, ...}``: numbers and strings kept, anything else a string
    (``"true"``, ``"none"``, ``"[0, 20]"``)."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten_config(value, f"{name}."))
        elif value is None or isinstance(value, bool):
            flat[name] = str(value).lower()
        else:
            flat[name] = value if isinstance(value, (int, float, str)) else str(value)
    return flat


class TensorBoardSink(Sink):
    """Writes one run's TensorBoard events into ``run_dir`` (the event file at the first record); ``images=False``
    skips the heatmaps. ``on_end`` without ``on_start`` still writes the hparams session."""

    def __init__(self, run_dir: Path, images: bool = True):
        from torch.utils.tensorboard import SummaryWriter  # fails here if tensorboard is missing

        self._writer_class = SummaryWriter
        self.run_dir = Path(run_dir)
        self.images = images
        self.info: RunInfo | None = None
        self._names: list[str] = []  # tag suffixes <pos>_<tok>
        self._focus_step: int | None = None  # the first snapshot step whose mean focus weight passed 0.9
        self._images: list[tuple[str, int, Drawing]] = []  # (tag, step, heatmap) not added yet

    @functools.cached_property
    def writer(self):
        return self._writer_class(log_dir=str(self.run_dir))

    def on_start(self, info: RunInfo) -> None:
        self.info = info
        self._names = tag_names(info.tokens)
        w = self.writer
        w.add_text("run/sentence", str(info.config.get("sentence", "")), 0)
        for key in ("name", "notes"):  # a run's label, when it has one
            if info.config.get(key):
                w.add_text(f"run/{key}", str(info.config[key]), 0)
        cells = [repr(tok).replace("|", "\\|") for tok in info.tokens]  # repr: leading spaces show
        rows = [f"| {pos} | {tid} | `{cell}` |" for pos, (tid, cell) in enumerate(zip(info.token_ids, cells))]
        w.add_text("run/tokens", "\n".join(["| position | id | token |", "| ---: | ---: | --- |", *rows]), 0)
        w.add_text("run/config", "```yaml\n" + OmegaConf.to_yaml(info.config) + "```", 0)

    def on_losses(self, steps: np.ndarray, losses: np.ndarray) -> None:
        for step, loss in zip(steps.tolist(), losses.tolist()):
            self.writer.add_scalar("loss", loss, step)

    def on_snapshot(self, snapshot: Snapshot) -> None:
        heads = np.asarray(snapshot.weights)  # (H, T, T)
        w = head_mean(heads)  # (T, T): the one picture (H = 1: the head itself)
        step, query, add = snapshot.step, self.info.focus_token, self.writer.add_scalar
        for name, value in zip(self._names, w[query]):
            add(f"attention/focus/{name}", value, step)
        for name, value in zip(self._names, row_entropy(w)):
            add(f"attention/entropy/{name}", value, step)
        strongest = focus(np.concatenate([heads, w[None]]), query).weight  # (H + 1,): each head, then the mean
        add("focus/weight", strongest[-1], step)
        if self._focus_step is None and strongest[-1] > FOCUS_THRESHOLD:
            self._focus_step = step
        title, many = f"step={step}  loss={snapshot.loss:.4f}", len(heads) > 1
        images = [("attention/weights", w, title + ("  (mean of heads)" if many else ""))]  # (tag, (T, T), title)
        for h, head in enumerate(heads if many else []):
            add(f"focus/weight/head_{h}", strongest[h], step)
            for name, value in zip(self._names, row_entropy(head)):
                add(f"attention/entropy/head_{h}/{name}", value, step)
            images.append((f"attention/weights/head_{h}", head, f"{title}  head {h}"))
        if snapshot.val_loss is not None:
            add("val_loss", snapshot.val_loss, step)
        for layer, weights in enumerate(snapshot.layers if snapshot.layers is not None else []):  # a GPT's blocks
            mean = head_mean(weights)  # (T, T)
            add(f"focus/weight/layer_{layer}", mean[query].max(), step)
            images.append((f"attention/weights/layer_{layer}", mean, f"{title}  layer {layer} (mean of heads)"))
        for tag, picture, caption in images if self.images else []:  # drawn in a worker when there is one
            self._images.append((tag, step, Drawing(heatmap_pixels, self.info.tokens, picture, caption)))
        self._add_images(wait=False)

    def _add_images(self, wait: bool) -> None:
        while self._images and (wait or self._images[0][2].done()):
            tag, step, drawing = self._images.pop(0)
            self.writer.add_image(tag, drawing.result(), step, dataformats="HWC")

    def flush(self) -> None:
        self._add_images(wait=True)
        if "writer" in vars(self):  # (made at the first record)
            self.writer.flush()

    def on_end(self, result: RunResult) -> None:
        from tensorboard.plugins.hparams import plugin_data_pb2
        from torch.utils.tensorboard.summary import hparams

        hp = {**flatten_config(self.info.config if self.info else {}), "status": result.status,
              "error": result.error or ""}  # the one-line reason of a run that did not complete
        final, reached = result.final_loss, result.steps_to_threshold
        metrics = {"hparam/final_loss": float("nan") if final is None else float(final),
                   "hparam/steps_to_threshold": -1 if reached is None else reached,
                   "hparam/focus_step": -1 if self._focus_step is None else self._focus_step}
        step = max(result.steps_run - 1, 0)  # the last loss's (the run counts every step a sink was sent)
        exp, ssi, sei = hparams(hp, metrics)
        # torch always writes STATUS_SUCCESS; record the run's real status instead
        plugin = sei.value[0].metadata.plugin_data
        data = plugin_data_pb2.HParamsPluginData.FromString(plugin.content)
        data.session_end_info.status = "STATUS_SUCCESS" if result.status == "completed" else "STATUS_FAILURE"
        plugin.content = data.SerializeToString()
        for summary in (exp, ssi, sei):
            self.writer.file_writer.add_summary(summary, step)
        for tag, value in metrics.items():
            self.writer.add_scalar(tag, value, step)

    def close(self) -> None:
        self.flush()
        if "writer" in vars(self):
            self.writer.close()

