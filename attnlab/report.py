"""``attnlab-report PATH... [-o FILE]``: one offline HTML page that shows attention learning.

One run gives its detail view: a step scrubber over the snapshots (slider, play/pause, arrow
keys), the attention heatmap (rows = query tokens, columns = key tokens, each row sums to 1;
tutorial §4.3 and §5) with token labels and cell values, a head selector (each head and their
mean), hover a query token to highlight its row and list where it attends (click locks it), the
loss curve on a log axis with the current step marked, how the focus token's attention moves
over training, and the run's status, steps-to-threshold, config and versions. Two or more runs
(or a sweep dir) give a comparison: a sortable table (the columns of ``attnlab-compare``), small
multiples of every run's attention on one shared step slider (each run shows its nearest
snapshot), the config keys that differ, the losses overlaid; click a run to open its detail view.

Rendering: plain JavaScript with ``<canvas>`` (heatmaps) and SVG (line charts), written for this
page, in one template (``attnlab/report_template.html``, about 70 KB). The alternatives were
measured (npm, 2026-11): Plotly inlines as ``plotly.min.js`` 4.8 MB, and even its cartesian
bundle is 1.5 MB, more than this page's whole 1 MB budget for the default run; Vega + Vega-Lite
+ vega-embed come to 0.83 MB minified. Neither does what the page needs without custom code
anyway: a heatmap of T×T = 65,536 cells (T = 256) redrawn for every slider step (here: one
``putImageData`` of T×T pixels, scaled; well under the 50 ms budget), a row highlight that
follows the pointer and locks on click, one slider driving a grid of small multiples and two
charts at once. Plotly re-renders a heatmap trace per frame and would need its event API and
our own code for the row logic; Vega-Lite draws each cell as a mark (slow at 65k cells) and
expresses the hover/lock/shared-slider coupling only through signals we would write anyway.

The data is embedded as the contract in issue 13 / the README says:
``<script type="application/json" id="attnlab-data">{"runs": [...]}</script>``, one record per
run as :func:`load_run` returns it. The JSON is escaped so no text from a run (token, config
value, error) can end the script element (``<``, ``>``, ``&``, U+2028/9 as ``\\uXXXX``), and the
page inserts every piece of text into the DOM as text (``textContent``), never as HTML.

A run dir is someone else's data, not code: every file is opened without following a symlink,
must be a regular file, and is size-checked (``fstat``) before it is read; ``attention.npz`` is
never loaded whole (its ``.npy`` headers are parsed and only the chosen frames are read, at
their offsets); ``.hydra/config.yaml`` is read with ``yaml.safe_load`` as plain data (no
OmegaConf, no resolvers, nothing instantiated; plain ``${a.b}`` references are looked up in
the same data for display, nothing else is evaluated); nothing read is executed. A damaged run
becomes a record whose ``error`` says what is wrong, and the rest of the report is written.

Downsampling (the page budget): the attention weights of all runs on one page get
:data:`WEIGHT_BUDGET` bytes of JSON (18 MB; the template, tokens, loss curves and configs fit in
the remaining 2 MB of the 20 MB page budget). A value rounded to 4 decimals takes at most 7
bytes of JSON (``0.1234,``), so one snapshot takes at most ``H * T * (7 T + 2)`` bytes; a run
whose snapshots do not all fit keeps ``k = budget // frame_bytes`` snapshots (at least 2),
evenly spaced by index with the first and the last always kept (as the PNG figure picks its
panels). Runs that need less than an equal share leave the rest to the others. The page says
"showing k of n snapshots". Example: 1,000 snapshots at T = 256, H = 1: 39 of 1,000 (every
~26th), a page of about 11 MB. Loss curves longer than :data:`MAX_LOSS_POINTS` points are
thinned the same way (the loss at every shown snapshot step is kept exactly).
"""
from __future__ import annotations

import argparse
import html
import io
import json
import math
import os
import re
import stat
import string
import struct
import sys
import zipfile
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from attnlab import __version__
from attnlab.artifacts import atomic_write_text
from attnlab.errors import AttnlabError, RunDirError

REPORT = "report.html"
TEMPLATE = Path(__file__).with_name("report_template.html")
DATA_ID = "attnlab-data"

PAGE_BUDGET = 20_000_000  # bytes: a page never needs more (issue 13's 20 MB, decimal)
WEIGHT_BUDGET = 18_000_000  # bytes of weights JSON on one page, shared by its runs
BYTES_PER_WEIGHT = 7  # upper bound of one weight in JSON: "0.1234," (rounded to 4 decimals)
DECIMALS = 4
MIN_FRAMES = 2  # first and last snapshot, whatever the budget
MAX_LOSS_POINTS = 2000  # loss curve points per run on the page

# bounded reads (bytes): a run dir from elsewhere is data
MAX_YAML_BYTES = 1 << 20  # .hydra/config.yaml, .hydra/overrides.yaml
MAX_JSON_BYTES = 4 << 20  # summary.json
MAX_CSV_BYTES = 64 << 20  # metrics.csv (~2.5 million steps)
MAX_SMALL_ARRAY_BYTES = 16 << 20  # steps, tokens, token_ids, walkthrough weights
MAX_NPY_HEADER = 10_000  # numpy's own default limit for a .npy header
MAX_STREAMED_BYTES = 1 << 30  # a compressed .npz member is decompressed from its start: at most this far
MAX_STR = 2000  # characters of any one string put on the page (config values, errors)
MAX_NODES = 20_000  # values of one config/summary put on the page (YAML aliases can multiply them)
MAX_DEPTH = 32

_KNOWN_SUMMARY = {"status", "task", "started_at", "final_loss", "steps_run", "wall_time_s", "error",
                  "versions", "steps_to_threshold", "token_table"}


class DamagedRun(RunDirError):
    """A file of a run dir cannot be used (missing where required, not a regular file, too
    large, malformed). ``str(err)`` is one line naming the file and what is wrong."""


# ============================================================================ bounded reading
def _shown(path: Path) -> str:
    """A run-dir file as messages name it: ``metrics.csv``, ``.hydra/config.yaml``."""
    return f"{path.parent.name}/{path.name}" if path.parent.name == ".hydra" else path.name


def _open_regular(path: Path) -> int:
    """A read-only descriptor for ``path``: no symlink followed, no blocking on a FIFO, and
    it must be a regular file. Raises DamagedRun."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise DamagedRun(f"{_shown(path)}: missing") from None
    except OSError as err:
        if os.path.islink(path):
            raise DamagedRun(f"{_shown(path)}: a symbolic link (only regular files are read)") from None
        raise DamagedRun(f"{_shown(path)}: cannot open ({err.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise DamagedRun(f"{_shown(path)}: not a regular file")
    return fd


def _read_bounded(path: Path, max_bytes: int) -> bytes:
    """The bytes of the regular file ``path``, refused (DamagedRun) when larger than ``max_bytes``."""
    fd = _open_regular(path)
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > max_bytes:
            raise DamagedRun(f"{_shown(path)}: {size:,} bytes, more than the {max_bytes:,} bytes read for a report")
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:  # grew while reading
        raise DamagedRun(f"{_shown(path)}: more than the {max_bytes:,} bytes read for a report")
    return data


def _read_yaml(path: Path) -> Any:
    """``path`` as plain YAML data (``yaml.safe_load``: no tags, no objects, nothing resolved)."""
    import yaml

    try:
        return yaml.safe_load(_read_bounded(path, MAX_YAML_BYTES).decode("utf-8"))
    except yaml.YAMLError as err:
        raise DamagedRun(f"{_shown(path)}: not valid YAML ({_one_line(err)})") from None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(_read_bounded(path, MAX_JSON_BYTES).decode("utf-8"))
    except (ValueError, RecursionError) as err:
        raise DamagedRun(f"{_shown(path)}: not valid JSON ({_one_line(err)})") from None


def _read_metrics(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """``metrics.csv`` as ``(steps (N,) int64, losses (N,) float64)`` (non-numbers as NaN)."""
    text = _read_bounded(path, MAX_CSV_BYTES).decode("utf-8", errors="replace")
    lines = text.splitlines()
    if not lines or lines[0].split(",")[:2] != ["step", "loss"]:
        raise DamagedRun(f"{_shown(path)}: header must start with step,loss")
    steps, losses = [], []
    for n, line in enumerate(lines[1:], start=2):
        if not line:
            continue
        parts = line.split(",", 2)
        try:
            steps.append(int(parts[0]))
            losses.append(float(parts[1]) if len(parts) > 1 else math.nan)
        except ValueError:
            raise DamagedRun(f"{_shown(path)}: line {n} is not step,loss: {_clip(line, 60)!r}") from None
    return np.asarray(steps, dtype=np.int64), np.asarray(losses, dtype=np.float64)


class _Npz:
    """Bounded reading of an ``.npz`` archive: ``.npy`` headers are parsed (numpy's safe
    parser, size-limited), data is read only where asked. Stored members (what attnlab and
    ``np.savez`` write) are read at their offsets; compressed ones are streamed."""

    def __init__(self, path: Path):
        self.path = path
        self.file = os.fdopen(_open_regular(path), "rb")
        try:
            self.zip = zipfile.ZipFile(self.file)
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as err:
            self.file.close()
            raise DamagedRun(f"{path.name}: not an .npz archive ({_one_line(err)})") from None
        self.members = {i.filename: i for i in self.zip.infolist()}

    def close(self) -> None:
        self.zip.close()
        self.file.close()

    def __enter__(self) -> "_Npz":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def has(self, key: str) -> bool:
        return f"{key}.npy" in self.members

    def header(self, key: str) -> tuple[tuple[int, ...], np.dtype, int, zipfile.ZipInfo]:
        """``(shape, dtype, offset of the data inside the member, member)``."""
        info = self.members.get(f"{key}.npy")
        if info is None:
            raise DamagedRun(f"{self.path.name}: no {key!r} array")
        with self.zip.open(info) as m:
            head = io.BytesIO(m.read(min(info.file_size, MAX_NPY_HEADER + 64)))
        try:
            version = np.lib.format.read_magic(head)
            reader = {(1, 0): np.lib.format.read_array_header_1_0,
                      (2, 0): np.lib.format.read_array_header_2_0}.get(version)
            if reader is None:
                raise ValueError(f".npy format version {version} not read here")
            shape, fortran, dtype = reader(head, max_header_size=MAX_NPY_HEADER)
        except (ValueError, SyntaxError, EOFError, TypeError) as err:
            raise DamagedRun(f"{self.path.name}: {key!r}: bad .npy header ({_one_line(err)})") from None
        if dtype.hasobject or fortran:
            raise DamagedRun(f"{self.path.name}: {key!r}: {'object' if dtype.hasobject else 'Fortran-order'} "
                             "arrays are not read")
        start = head.tell()
        nbytes = math.prod(shape) * dtype.itemsize
        if info.file_size != start + nbytes:
            raise DamagedRun(f"{self.path.name}: {key!r}: {info.file_size - start:,} bytes of data for shape "
                             f"{tuple(shape)} {dtype} ({nbytes:,} expected; truncated?)")
        return tuple(int(d) for d in shape), dtype, start, info

    def _read_at(self, info: zipfile.ZipInfo, ranges: list[tuple[int, int]]) -> list[bytes]:
        """Bytes at ``(offset, length)`` ranges (ascending) of a member's data."""
        if info.compress_type == zipfile.ZIP_STORED:
            self.file.seek(info.header_offset)
            local = self.file.read(30)
            if len(local) != 30 or local[:4] != b"PK\x03\x04":
                raise DamagedRun(f"{self.path.name}: {info.filename}: bad local zip header")
            name_len, extra_len = struct.unpack("<HH", local[26:30])
            base = info.header_offset + 30 + name_len + extra_len
            out = []
            for offset, length in ranges:
                self.file.seek(base + offset)
                chunk = self.file.read(length)
                if len(chunk) != length:
                    raise DamagedRun(f"{self.path.name}: {info.filename}: truncated")
                out.append(chunk)
            return out
        if info.file_size > MAX_STREAMED_BYTES:  # attnlab writes stored members; this one is compressed
            raise DamagedRun(f"{self.path.name}: {info.filename}: compressed, {info.file_size:,} bytes unpacked "
                             f"(more than the {MAX_STREAMED_BYTES:,} decompressed for a report)")
        out, pos = [], 0
        with self.zip.open(info) as m:
            for offset, length in ranges:
                while pos < offset:  # skip (streamed: compressed members cannot seek)
                    skipped = len(m.read(min(offset - pos, 1 << 20)))
                    if not skipped:
                        raise DamagedRun(f"{self.path.name}: {info.filename}: truncated")
                    pos += skipped
                chunk = m.read(length)
                if len(chunk) != length:
                    raise DamagedRun(f"{self.path.name}: {info.filename}: truncated")
                out.append(chunk)
                pos += length
        return out

    def array(self, key: str, kinds: str, ndim: int | None = None,
              max_bytes: int = MAX_SMALL_ARRAY_BYTES) -> np.ndarray:
        """The whole (small) array ``key``; its dtype kind must be one of ``kinds`` (``"iu"``,
        ``"U"``, ``"f"`` ...)."""
        shape, dtype, start, info = self.header(key)
        self._check(key, shape, dtype, kinds, ndim)
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes > max_bytes:
            raise DamagedRun(f"{self.path.name}: {key!r}: {nbytes:,} bytes, more than the {max_bytes:,} read "
                             "for a report")
        (data,) = self._read_at(info, [(start, nbytes)])
        return np.frombuffer(data, dtype=dtype).reshape(shape)

    def frames(self, key: str, indices: Sequence[int]) -> np.ndarray:
        """Frames ``indices`` (ascending) along the first axis of ``key``: ``(len(indices), *shape[1:])``."""
        shape, dtype, start, info = self.header(key)
        frame = math.prod(shape[1:]) * dtype.itemsize
        chunks = self._read_at(info, [(start + i * frame, frame) for i in indices])
        return np.frombuffer(b"".join(chunks), dtype=dtype).reshape((len(indices), *shape[1:]))

    def _check(self, key: str, shape: tuple[int, ...], dtype: np.dtype, kinds: str, ndim: int | None) -> None:
        if dtype.kind not in kinds:
            raise DamagedRun(f"{self.path.name}: {key!r} has dtype {dtype}, expected kind {kinds!r}")
        if ndim is not None and len(shape) != ndim:
            raise DamagedRun(f"{self.path.name}: {key!r} has shape {shape}, expected {ndim} dimensions")


def _weights_shape(npz: _Npz, n_steps: int, n_tokens: int) -> tuple[int, int, int]:
    """``(S, H, T)`` of ``weights`` (S, H, T, T) (or (S, T, T): H = 1), checked against the
    steps and tokens arrays. Raises DamagedRun."""
    shape, dtype, _, _ = npz.header("weights")
    npz._check("weights", shape, dtype, "f", None)
    if len(shape) == 3:
        shape = (shape[0], 1, shape[1], shape[2])
    if len(shape) != 4 or shape[2] != shape[3]:
        raise DamagedRun(f"attention.npz: 'weights' has shape {shape}, expected (S, H, T, T)")
    S, H, T, _ = shape
    if S != n_steps or T != n_tokens:
        raise DamagedRun(f"attention.npz: 'weights' has shape {shape} but there are {n_steps} steps "
                         f"and {n_tokens} tokens")
    return S, H, T


def frame_bytes(H: int, T: int) -> int:
    """Upper bound of the JSON bytes of one snapshot (H, T, T) rounded to :data:`DECIMALS`."""
    return H * T * (BYTES_PER_WEIGHT * T + 2) + 2 * H + 2


def pick_frames(n: int, budget: int, fbytes: int) -> list[int]:
    """Indices of the snapshots to show out of ``n``: all when they fit in ``budget`` bytes
    (``fbytes`` each), else ``max(2, budget // fbytes)`` evenly spaced, first and last kept."""
    if n <= 0:
        return []
    k = max(MIN_FRAMES, budget // max(fbytes, 1))
    if n <= k:
        return list(range(n))
    return sorted({int(i) for i in np.round(np.linspace(0, n - 1, k))})


def weight_need(run_dir: Path) -> int:
    """JSON bytes all of ``run_dir``'s snapshots would take on the page (0 when unreadable);
    reads only the ``.npy`` headers of ``attention.npz``."""
    path = Path(run_dir) / "attention.npz"
    if not path.is_file():
        return 0
    try:
        with _Npz(path) as npz:
            shape = npz.header("weights")[0]
    except Exception:  # a damaged file: load_run will say what is wrong
        return 0
    if len(shape) == 3:
        shape = (shape[0], 1, shape[1], shape[2])
    if len(shape) != 4:
        return 0
    return shape[0] * frame_bytes(shape[1], shape[2])


def share_budget(needs: Sequence[int], budget: int = WEIGHT_BUDGET) -> list[int]:
    """Split ``budget`` bytes among runs needing ``needs`` bytes (0: no attention.npz): equal
    shares, and what a run needs less than its share goes to the others (water filling)."""
    out = [0] * len(needs)
    todo = sorted((i for i in range(len(needs)) if needs[i] > 0), key=lambda i: needs[i])
    left = budget
    for n, i in enumerate(todo):
        out[i] = min(needs[i], left // (len(todo) - n))
        left -= out[i]
    return out


# ============================================================================ one run
def _one_line(err: BaseException | str) -> str:
    return _clip(" ".join(str(err).split()), 300)


def _clip(text: str, n: int = MAX_STR) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _safe_str(s: str) -> str:
    """A string that encodes as UTF-8 (lone surrogates as ``\\udXXX``), clipped to MAX_STR."""
    return _clip(s.encode("utf-8", "backslashreplace").decode("utf-8"))


def _jsonable(value: Any, budget: list[int] | None = None, depth: int = 0) -> Any:
    """Plain JSON data from YAML/JSON/numpy data: dict keys as strings, strings made UTF-8-safe
    and clipped, non-finite floats as the strings "nan"/"inf"/"-inf", at most :data:`MAX_NODES`
    values and :data:`MAX_DEPTH` levels (the rest becomes "…"; YAML aliases are copied, so
    this bound is what keeps an alias bomb small)."""
    budget = [MAX_NODES] if budget is None else budget
    budget[0] -= 1
    if budget[0] < 0 or depth > MAX_DEPTH:
        return "…"
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        v = float(value)
        return v if math.isfinite(v) else ("nan" if math.isnan(v) else "inf" if v > 0 else "-inf")
    if isinstance(value, str):
        return _safe_str(value)
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if budget[0] < 0:
                out["…"] = "…"
                break
            out[_safe_str(str(k))] = _jsonable(v, budget, depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        items: list[Any] = []
        for v in value:
            if budget[0] < 0:
                items.append("…")
                break
            items.append(_jsonable(v, budget, depth + 1))
        return items
    return _safe_str(str(value))  # dates and the like (safe_load builds no other objects)


_REF = re.compile(r"\$\{([A-Za-z_][\w-]*(?:\.[\w-]+)*)\}")
MAX_REF_LOOKUPS = 100_000  # lookups resolve_refs makes for one config, at most


def resolve_refs(cfg: Any) -> Any:
    """``cfg`` with plain ``${a.b}`` references to scalar values replaced by the value at
    ``a.b`` in ``cfg`` itself, as Hydra shows the resolved config (``model.d_v:
    ${model.d_model}`` -> 6; ``"d=${model.d_model}"`` -> ``"d=6"``). Pure data lookup, bounded
    (10 hops per reference, :data:`MAX_REF_LOOKUPS` in all): anything else (``${oc.env:X}``,
    resolvers, missing keys, whole sub-configs, cycles) is left as written."""
    if not isinstance(cfg, dict):
        return cfg
    lookups = [MAX_REF_LOOKUPS]

    def value_at(path: str) -> Any:
        lookups[0] -= 1
        if lookups[0] < 0:
            raise KeyError(path)
        node: Any = cfg
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                raise KeyError(path)
            node = node[part]
        if isinstance(node, (dict, list)):
            raise KeyError(path)
        return node

    def scalar(text: str, hops: int) -> Any:
        if hops > 10:
            raise KeyError(text)
        whole = _REF.fullmatch(text)
        if whole:
            v = value_at(whole.group(1))
            return scalar(v, hops + 1) if isinstance(v, str) else v

        def sub(m: re.Match) -> str:
            v = value_at(m.group(1))
            return str(scalar(v, hops + 1) if isinstance(v, str) else v)

        return _REF.sub(sub, text)

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        if isinstance(node, str) and "${" in node:
            try:
                return scalar(node, 0)
            except KeyError:
                return node
        return node

    return walk(cfg)


def _select(cfg: Any, dotted: str, default: Any = None) -> Any:
    node = cfg
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def _token_labels(token_ids: Sequence[int], encoding: Any) -> list[str]:
    """Readable labels for a walkthrough's token ids (packaged GPT-2 ranks only; others as ``#id``)."""
    if encoding in ("gpt2", "r50k_base"):
        try:
            from attnlab.tokenizer import token_labels

            return token_labels([int(t) for t in token_ids], encoding)
        except Exception:
            pass
    return [f"#{int(t)}" for t in token_ids]


def _rounded(w: np.ndarray) -> list:
    """(k, H, T, T) weights as nested lists rounded to :data:`DECIMALS`, clipped to [0, 1];
    non-finite values (a diverged run) as None."""
    w = np.clip(np.round(np.asarray(w, dtype=np.float64), DECIMALS), 0.0, 1.0)
    finite = np.isfinite(w)
    if finite.all():
        return w.tolist()
    out = np.where(finite, w, 0.0).astype(object)
    out[~finite] = None
    return out.tolist()


def _thin(n: int, k: int, keep: Iterable[int] = ()) -> np.ndarray:
    """Indices of at most about ``k`` of ``n`` points, evenly spaced, first/last and ``keep`` kept."""
    if n <= k:
        return np.arange(n)
    idx = set(np.round(np.linspace(0, n - 1, k)).astype(int).tolist())
    idx.update(i for i in keep if 0 <= i < n)
    return np.asarray(sorted(idx), dtype=np.int64)


def _finite_or_none(values: Iterable[float]) -> list[float | None]:
    return [float(v) if math.isfinite(v) else None for v in values]


def load_run(run_dir: Path | str, name: str | None = None, max_weight_bytes: int = WEIGHT_BUDGET) -> dict[str, Any]:
    """Read one run dir into the report's run record (JSON-ready; the contract of issue 13).

    Fields: ``name`` (``name`` or the folder's name), ``run_dir``, ``status`` (summary.json's:
    running, completed, diverged, interrupted, failed; ``missing`` without summary.json,
    ``unreadable`` when it cannot be read), ``error`` (the run's own error, else what is wrong
    with its files, else None), ``problems`` (one line per damaged file), ``kind`` (train,
    walkthrough), ``tokens`` [T] (labels as ``tokenizer.token_labels``), ``token_ids`` [T],
    ``steps`` [k] (the snapshot steps shown), ``snapshots_total`` (n, all snapshots of the run),
    ``weights`` k × H × T × T (attention weights at those steps, rounded to 4 decimals, None
    where not finite), ``heads`` (H), ``snapshot_loss`` [k] (the loss at each shown step),
    ``loss`` {``steps``, ``values`` (MSE, None where not finite), ``total`` (points in
    metrics.csv)}, ``loss_threshold``, ``steps_to_threshold``, ``final_loss``, ``steps_run``,
    ``wall_time_s`` (seconds), ``focus_token`` (position or None), ``focus`` {``token``,
    ``target``, ``weight``, ``step``} at the last snapshot (heads averaged; as attnlab-compare),
    ``config`` (``.hydra/config.yaml`` as plain data, plain ``${a.b}`` references looked up),
    ``overrides`` [str], ``versions`` {...}, ``recorded`` (other summary.json fields, e.g. the
    exercise observations).

    ``max_weight_bytes``: JSON bytes the weights may take (see :func:`pick_frames`). Never
    raises for a damaged run; every read is bounded (see the module docstring)."""
    run_dir = Path(run_dir)
    rec: dict[str, Any] = {
        "name": name if name is not None else run_dir.name, "run_dir": str(run_dir), "status": None,
        "error": None, "problems": [], "kind": None, "tokens": [], "token_ids": [], "steps": [],
        "snapshots_total": 0, "weights": [], "heads": 0, "snapshot_loss": [],
        "loss": {"steps": [], "values": [], "total": 0}, "loss_threshold": None, "steps_to_threshold": None,
        "final_loss": None, "steps_run": None, "wall_time_s": None, "focus_token": None, "focus": None,
        "config": {}, "overrides": [], "versions": {}, "recorded": {},
    }
    problems: list[str] = rec["problems"]

    def attempt(fn, *args):
        try:
            return fn(*args)
        except DamagedRun as err:
            problems.append(_one_line(err))
        except Exception as err:  # anything a malformed file makes a parser raise
            problems.append(_one_line(f"{type(err).__name__}: {err}"))
        return None

    cfg = attempt(_read_yaml, run_dir / ".hydra" / "config.yaml")
    if cfg is not None and not isinstance(cfg, dict):
        problems.append(".hydra/config.yaml: not a mapping")
        cfg = None
    cfg = resolve_refs(_jsonable(cfg)) if cfg is not None else {}  # bounded first, then looked up
    rec["config"] = cfg
    if (run_dir / ".hydra" / "overrides.yaml").exists():
        overrides = attempt(_read_yaml, run_dir / ".hydra" / "overrides.yaml")
        rec["overrides"] = _jsonable([str(o) for o in overrides]) if isinstance(overrides, list) else []

    summary: dict[str, Any] = {}
    if not (run_dir / "summary.json").exists() and not os.path.islink(run_dir / "summary.json"):
        rec["status"] = "missing"
        rec["error"] = "no summary.json (the job did not start, or died before writing it)"
    else:
        loaded = attempt(_read_json, run_dir / "summary.json")
        if isinstance(loaded, dict):
            summary = loaded
            rec["status"] = _jsonable(summary.get("status"))
            rec["error"] = _jsonable(summary.get("error"))
        else:
            if loaded is not None:
                problems.append("summary.json: not a JSON object")
            rec["status"] = "unreadable"
    for key in ("final_loss", "steps_run", "wall_time_s"):
        rec[key] = _jsonable(summary.get(key))
    rec["versions"] = _jsonable(summary.get("versions")) if isinstance(summary.get("versions"), dict) else {}
    rec["recorded"] = _jsonable({k: v for k, v in summary.items() if k not in _KNOWN_SUMMARY})
    kind = summary.get("task", _select(cfg, "task"))
    rec["kind"] = kind if kind in ("train", "walkthrough") else None
    threshold = _select(cfg, "train.loss_threshold")
    usable = isinstance(threshold, (int, float)) and not isinstance(threshold, bool)
    rec["loss_threshold"] = float(threshold) if usable and math.isfinite(threshold) and threshold > 0 else None
    focus = _select(cfg, "train.focus_token", 1)
    focus = focus if isinstance(focus, int) and not isinstance(focus, bool) else None
    ran = rec["status"] in ("completed", "diverged", "interrupted")

    # loss curve
    steps = losses = None
    metrics = run_dir / "metrics.csv"
    if metrics.exists() or os.path.islink(metrics):
        got = attempt(_read_metrics, metrics)
        if got is not None:
            steps, losses = got
    elif ran and rec["kind"] == "train":
        problems.append("metrics.csv: missing")
    if steps is not None:
        rec["loss"]["total"] = int(steps.size)
        stt = summary.get("steps_to_threshold")
        if isinstance(stt, int) and not isinstance(stt, bool):
            rec["steps_to_threshold"] = stt
        elif rec["loss_threshold"] is not None and steps.size:
            below = np.flatnonzero(losses < rec["loss_threshold"])
            rec["steps_to_threshold"] = int(steps[below[0]]) if below.size else None
    elif isinstance(summary.get("steps_to_threshold"), int):
        rec["steps_to_threshold"] = summary["steps_to_threshold"]

    # attention
    att, walk = run_dir / "attention.npz", run_dir / "walkthrough.npz"
    if att.exists() or os.path.islink(att):
        attempt(_load_attention, rec, att, max_weight_bytes)
    elif walk.exists() or os.path.islink(walk):
        attempt(_load_walkthrough, rec, walk, _select(cfg, "tokenizer.encoding", "gpt2"))
    elif ran and rec["kind"] == "train":
        problems.append("attention.npz: missing")

    if steps is not None and steps.size:
        at = {int(s): i for i, s in enumerate(steps.tolist())}
        keep = [at[s] for s in rec["steps"] if s in at]
        idx = _thin(int(steps.size), MAX_LOSS_POINTS, keep)
        rec["loss"]["steps"] = steps[idx].tolist()
        rec["loss"]["values"] = _finite_or_none(losses[idx].tolist())
        rec["snapshot_loss"] = [(_finite_or_none([losses[at[s]]])[0] if s in at else None) for s in rec["steps"]]
    else:
        rec["snapshot_loss"] = [None] * len(rec["steps"])

    T = len(rec["tokens"])
    rec["focus_token"] = focus if focus is not None and 0 <= focus < T else None
    if rec["weights"] and rec["focus_token"] is not None:
        last = np.asarray(rec["weights"][-1], dtype=np.float64).mean(axis=0)  # None -> nan; heads averaged
        row = last[rec["focus_token"]]
        if np.isfinite(row).all():
            j = int(np.argmax(row))
            rec["focus"] = {"token": rec["tokens"][rec["focus_token"]], "target": rec["tokens"][j],
                            "weight": round(float(row[j]), DECIMALS),
                            "step": rec["steps"][-1] if rec["kind"] != "walkthrough" else None}
    if problems and not rec["error"]:
        rec["error"] = "; ".join(problems)
    return rec


def _load_attention(rec: dict[str, Any], path: Path, max_weight_bytes: int) -> None:
    with _Npz(path) as npz:
        steps = npz.array("steps", "iu", ndim=1)
        tokens = npz.array("tokens", "US", ndim=1)
        ids = npz.array("token_ids", "iu", ndim=1) if npz.has("token_ids") else np.zeros(0, dtype=np.int64)
        labels = [t.decode("utf-8", "backslashreplace") if isinstance(t, bytes) else str(t) for t in tokens.tolist()]
        rec["tokens"] = [_safe_str(t) for t in labels]
        rec["token_ids"] = [int(i) for i in ids.tolist()] if ids.size == len(labels) else []
        S, H, T = _weights_shape(npz, int(steps.size), len(labels))
        rec["snapshots_total"], rec["heads"] = S, H
        idx = pick_frames(S, max_weight_bytes, frame_bytes(H, T))
        if not idx:
            return
        frames = npz.frames("weights", idx).reshape(len(idx), H, T, T)
        rec["steps"] = [int(steps[i]) for i in idx]
        rec["weights"] = _rounded(frames)


def _load_walkthrough(rec: dict[str, Any], path: Path, encoding: Any) -> None:
    with _Npz(path) as npz:
        w = npz.array("weights", "f")
        ids = npz.array("token_ids", "iu", ndim=1)
    if w.ndim == 2:
        w = w[None]
    if w.ndim != 3 or w.shape[1] != w.shape[2] or w.shape[1] != ids.size:
        raise DamagedRun(f"walkthrough.npz: 'weights' has shape {w.shape}, expected (T, T) with T = {ids.size}")
    rec["kind"] = "walkthrough"
    rec["token_ids"] = [int(i) for i in ids.tolist()]
    rec["tokens"] = [_safe_str(t) for t in _token_labels(rec["token_ids"], encoding)]
    rec["snapshots_total"], rec["heads"] = 1, int(w.shape[0])
    rec["steps"] = [0]
    rec["weights"] = _rounded(w[None])


# ============================================================================ many runs
def find_runs(path: Path) -> list[Path]:
    """Run dirs at or below ``path`` (see :func:`attnlab.runs.find_runs`). Raises RunDirError."""
    from attnlab.runs import find_runs as _find

    return _find(Path(path))


def _job_key(run: Path) -> tuple:
    head = run.name.split("_", 1)[0]
    return (int(head) if head.isdigit() else math.inf, run.name)


def collect_records(paths: Iterable[Path | str], budget: int = WEIGHT_BUDGET) -> list[dict[str, Any]]:
    """One record (:func:`load_run`) for every run under ``paths`` (run dirs and/or sweep dirs),
    in PATH order, then by job number; ``name`` is each run's folder relative to the common
    parent of the PATHs (as attnlab-compare's ``job``), ``label`` a short legend name. The
    weights of all runs share ``budget`` bytes (:func:`share_budget`). Raises RunDirError for a
    PATH that is not a run/sweep dir."""
    paths = [Path(p) for p in paths]
    found: list[tuple[int, Path]] = []
    for i, p in enumerate(paths):
        found.extend((i, r) for r in find_runs(p))
    found.sort(key=lambda x: (x[0], *_job_key(x[1])))
    runs = [r for _, r in found]
    if not runs:
        return []
    resolved = [r.resolve() for r in runs]
    if len(paths) == 1 and not (paths[0] / ".hydra" / "config.yaml").is_file():  # one sweep dir
        base = paths[0].resolve()
    else:
        base = Path(os.path.commonpath([str(r) for r in resolved]))
        if len(resolved) == 1 or base in resolved:
            base = base.parent
    names = [str(r.relative_to(base)) if r.is_relative_to(base) else r.name for r in resolved]
    shares = share_budget([weight_need(r) for r in runs], budget)
    records = [load_run(r, name=n, max_weight_bytes=s) for r, n, s in zip(runs, names, shares)]
    from attnlab.plots import short_names
    from attnlab.swept import run_labels

    # the legend names of attnlab-compare --plot: job number and swept values, "3: lr=0.05"
    labelled = run_labels([{"job": n, "path": str(r)} for n, r in zip(names, runs)], short_names(names))
    for rec, (short, values) in zip(records, labelled):
        rec["label"] = f"{short}: {values}" if values else short
    return records


# ============================================================================ the page
class _PageTemplate(string.Template):
    delimiter = "@@"  # never used by the page's own JavaScript or CSS


def script_json(data: Any) -> str:
    """``data`` as JSON that is safe inside ``<script type="application/json">``: ``<``, ``>``,
    ``&``, U+2028 and U+2029 written as ``\\uXXXX`` escapes (still the same JSON value), so no
    string can close the element or start a comment."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    return text


def render(records: Sequence[dict[str, Any]], title: str | None = None) -> str:
    """The page for ``records`` (one run: detail view; two or more: comparison) as HTML text."""
    if title is None:
        title = (f"attnlab · {records[0]['name']}" if len(records) == 1 else f"attnlab · {len(records)} runs")
    data = {"runs": list(records), "title": _safe_str(title),
            "generator": {"attnlab": __version__, "weight_budget_bytes": WEIGHT_BUDGET,
                          "bytes_per_weight": BYTES_PER_WEIGHT, "decimals": DECIMALS}}
    template = _PageTemplate(TEMPLATE.read_text(encoding="utf-8"))
    return template.substitute(title=html.escape(_safe_str(title)), data=script_json(data))


def write_page(records: Sequence[dict[str, Any]], out: Path | str, title: str | None = None) -> Path:
    """Write :func:`render` of ``records`` to ``out`` atomically (UTF-8); returns ``out``.
    Raises RunDirError when ``out``'s folder does not exist."""
    out = Path(out)
    if out.is_dir():
        out = out / REPORT
    if not out.parent.is_dir():
        raise RunDirError(f"{out}: folder {out.parent} does not exist")
    atomic_write_text(out, render(records, title))
    return out


def write_report(paths: Iterable[Path | str], out: Path | str) -> Path:
    """One page for the runs under ``paths`` (run dirs and/or sweep dirs: every run dir below
    a sweep dir) written atomically to ``out``; one run gives the detail view, two or more a
    comparison. Returns the path written. Raises RunDirError for a PATH that is not a run/sweep
    dir or an ``out`` whose folder does not exist; damaged runs become records with an error."""
    return write_page(collect_records(paths), out)


def write_run_report(run_dir: Path | str) -> Path:
    """``RUN_DIR/report.html`` for one run (what a training job writes at its end)."""
    run_dir = Path(run_dir)
    return write_page([load_run(run_dir)], run_dir / REPORT)


def write_sweep_report(sweep_dir: Path | str) -> Path:
    """``SWEEP_DIR/report.html`` over every run below ``sweep_dir`` (what a sweep writes at its end)."""
    sweep_dir = Path(sweep_dir)
    return write_report([sweep_dir], sweep_dir / REPORT)


# ============================================================================ CLI
def main(argv: Sequence[str] | None = None) -> int:
    """``attnlab-report PATH... [-o FILE]``: exit 0, or 2 with one line on stderr for a PATH
    that is not a run/sweep dir or an output that cannot be written. A damaged run is still
    reported (in the page, and as a warning line on stderr)."""
    parser = argparse.ArgumentParser(
        prog="attnlab-report",
        description="One offline HTML page of attention over training: a run dir gives its detail view, "
                    "several runs or a sweep dir a comparison.")
    parser.add_argument("paths", nargs="+", metavar="PATH", type=Path, help="run dir or sweep dir")
    parser.add_argument("-o", "--out", metavar="FILE", type=Path, default=Path(REPORT),
                        help=f"the page to write (default: ./{REPORT})")
    args = parser.parse_args(argv)
    try:
        records = collect_records(args.paths)
        out = write_page(records, args.out)
    except (AttnlabError, OSError) as err:
        print(f"attnlab-report: error: {_one_line(err)}", file=sys.stderr)
        return 2
    for rec in records:
        if rec["problems"]:
            print(f"attnlab-report: warning: {rec['name']}: {'; '.join(rec['problems'])}", file=sys.stderr)
    shown = sum(len(r["steps"]) for r in records)
    total = sum(r["snapshots_total"] for r in records)
    more = f", showing {shown} of {total} snapshots" if shown < total else ""
    print(f"report: {out} ({len(records)} run{'s' if len(records) != 1 else ''}{more}, "
          f"{out.stat().st_size / 1e6:.2f} MB)")
    return 0


def cli() -> None:
    """Console-script entry point (``attnlab-report``)."""
    sys.exit(main())


if __name__ == "__main__":
    cli()
