"""Helpers for the report tests: read a page's embedded data back, write made-up run dirs with
attnlab's own run-dir writer, and spot network references in a page."""
from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import yaml

from attnlab.core.records import RunInfo, RunResult, Snapshot
from attnlab.outputs.artifacts import RunDirSink, write_summary

DATA_OPEN = '<script type="application/json" id="attnlab-data">'


def page_data(page: Path | str) -> dict[str, Any]:
    """The JSON inside ``<script type="application/json" id="attnlab-data">`` of ``page``."""
    text = Path(page).read_text(encoding="utf-8")
    start = text.index(DATA_OPEN) + len(DATA_OPEN)
    return json.loads(text[start:text.index("</script>", start)])


class _Scripts(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.scripts: list[tuple[dict, str]] = []
        self._in: dict | None = None
        self._buf: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "script":
            self._in, self._buf = dict(attrs), []

    def handle_data(self, data):
        if self._in is not None:
            self._buf.append(data)

    def handle_endtag(self, tag):
        if tag == "script" and self._in is not None:
            self.scripts.append((self._in, "".join(self._buf)))
            self._in = None


def scripts_of(page: Path | str) -> list[tuple[dict, str]]:
    """Every ``<script>`` element of ``page`` as an HTML parser sees it: (attributes, text)."""
    parser = _Scripts()
    parser.feed(Path(page).read_text(encoding="utf-8"))
    return parser.scripts


# src= / href= / import ... "..." / url(...) that point at another host (http:, https: or //host)
NETWORK_REFS = [
    re.compile(r"""\b(?:src|href|srcset|action|poster|data)\s*=\s*["']?\s*(?:https?:)?//""", re.I),
    re.compile(r"""\bimport\s*(?:\(\s*|[^;'"\n]*\bfrom\s*|\s)["']\s*(?:https?:)?//""", re.I),
    re.compile(r"""@import\b""", re.I),
    re.compile(r"""\burl\(\s*["']?\s*(?:https?:)?//""", re.I),
]


def network_refs(text: str) -> list[str]:
    """Every place in ``text`` where a ``src``, ``href``, ``import`` or ``url(`` points at
    ``http://``, ``https://`` or a protocol-relative ``//host``."""
    return [m.group(0) for rx in NETWORK_REFS for m in rx.finditer(text)]


def softmax_rows(scores: np.ndarray) -> np.ndarray:
    z = scores - scores.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def write_synthetic_run(run_dir: Path, tokens: Sequence[str], steps: Sequence[int], heads: int = 1, seed: int = 0,
                        config: dict | None = None, status: str = "completed") -> Path:
    """A run dir written by attnlab's own writer (:class:`attnlab.outputs.artifacts.RunDirSink`) with
    made-up attention: softmax of fixed random scores, sharper at later steps (rows sum to 1),
    one loss per step (``1 / (1 + step)``) and ``.hydra/config.yaml`` (``config`` or a small one)."""
    run_dir = Path(run_dir)
    (run_dir / ".hydra").mkdir(parents=True, exist_ok=True)
    T, n_steps = len(tokens), max(steps) + 1
    cfg = config if config is not None else {
        "task": "train", "seed": seed, "sentence": "".join(tokens),
        "model": {"d_model": 6, "d_k": 4, "d_v": "${model.d_model}", "n_heads": heads},
        "train": {"steps": n_steps, "snapshot_steps": list(steps), "focus_token": 1, "loss_threshold": 0.001}}
    (run_dir / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg, allow_unicode=True, sort_keys=False),
                                                   encoding="utf-8")
    rng = np.random.default_rng(seed)
    scores = rng.normal(size=(heads, T, T))
    sink = RunDirSink(run_dir)
    sink.on_start(RunInfo(config=cfg, token_ids=list(range(T)), tokens=list(tokens), snapshot_steps=list(steps),
                          steps=n_steps, focus_token=1, run_dir=run_dir))
    losses = 1.0 / (1.0 + np.arange(n_steps, dtype=np.float64))
    done = 0
    for s in steps:
        sink.on_losses(np.arange(done, s + 1), losses[done:s + 1])
        done = s + 1
        w = softmax_rows(scores * (1.0 + s)).astype(np.float32)
        sink.on_snapshot(Snapshot(step=s, loss=float(losses[s]), weights=w))
    sink.on_losses(np.arange(done, n_steps), losses[done:])
    sink.on_end(RunResult(status=status, steps_run=n_steps, final_loss=float(losses[-1]), wall_time_s=0.5,
                          losses=losses))
    sink.close()
    write_summary(run_dir, sink.summary)
    return run_dir
