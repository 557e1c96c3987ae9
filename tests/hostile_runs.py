"""A corpus of broken and hostile run dirs (issue 11), built by this script from a healthy run.

Every case starts from a copy of a real run made by attnlab's own runner (``run_job``; a small
training run, or the walkthrough) and damages one thing. Each :class:`Case` declares its exact
outcome: which reader of :mod:`attnlab.saved.safe_read` raises and with which message fragment
(:class:`Raises`), or which value comes out, sanitised (:class:`Gives`); plus, for the files
``attnlab-reproduce`` reads, the fragment of its one-line error (exit 2).

Used by tests/test_safe_read.py, test_reproduce.py and test_broken_runs.py (each case in a
sweep beside a healthy run, through attnlab-compare and the report); also runnable::

    python tests/hostile_runs.py OUT_DIR    # writes every case as OUT_DIR/<case>/, lists them

The kinds follow the issue: code in a saved config (``_target_`` anywhere), secrets
(interpolations, resolvers), small files that cost without bound (alias, interpolation and zip
bombs, huge files, /dev/zero, FIFOs), links out of the run dir, damaged artifacts (truncated,
CRC-bad, wrong rank/dtype, bad rows, wrong JSON types), and text that drives a terminal.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import socket
import stat
import struct
import sys
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from attnlab.saved import safe_read as S  # noqa: E402

TRAIN_OVERRIDES = ("logging=off", "train.steps=40", "train.snapshot_steps=[0,10,39]")
WALK_OVERRIDES = ("experiment=tutorial_walkthrough", "logging=off")
SECRET_ENV = "ATTNLAB_CANARY_SECRET"  # tests set it to a random value that must never appear anywhere
CANARY = "canary.txt"  # a file outside the run dir whose content must never appear anywhere
PWNED = "pwned"  # a file outside the run dir that a payload would create if it ever ran
VICTIM = "victim.txt"  # a file outside the run dir that a payload would truncate

CONFIG, OVERRIDES, HYDRA = S.CONFIG, S.OVERRIDES, S.HYDRA
SUMMARY, METRICS, ATTENTION, WALKTHROUGH = S.SUMMARY, S.METRICS, S.ATTENTION, S.WALKTHROUGH


class Unsupported(Exception):
    """This machine cannot build the case (e.g. mknod without privileges)."""


# ----------------------------------------------------------------------------- healthy runs
def run_job(cfg, run_dir: Path) -> str:
    from attnlab.commands.job import run_job as run

    return run(cfg, run_dir).status


def make_healthy_run(run: Path, overrides: tuple[str, ...] = TRAIN_OVERRIDES) -> Path:
    """A real run made by attnlab's runner into ``run``, with ``.hydra/`` as Hydra writes it
    (the composed config saved with its interpolations, overrides.yaml, a hydra.yaml)."""
    import yaml
    from omegaconf import OmegaConf

    from conftest import compose_cfg

    cfg = compose_cfg(*overrides)
    (run / ".hydra").mkdir(parents=True)
    OmegaConf.save(cfg, run / CONFIG)
    (run / OVERRIDES).write_text(yaml.safe_dump(list(overrides)), encoding="utf-8")
    (run / HYDRA).write_text("hydra:\n  job:\n    name: attnlab\n    num: 0\n", encoding="utf-8")
    import contextlib

    with contextlib.redirect_stdout(io.StringIO()):  # the run's console output is not the corpus's
        status = run_job(cfg, run)
    assert status == "completed", status
    # attnlab also records the resolved config in summary.json, and reproduce prefers it; the corpus
    # attacks .hydra/config.yaml, so its runs leave it out, as runs of attnlab before that did
    # (test_reproduce checks the recorded-config path on its own)
    summary = json.loads((run / SUMMARY).read_text(encoding="utf-8"))
    summary.pop("config", None)
    (run / SUMMARY).write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return run


_SESSION: dict[str, Any] = {}


def session_secret() -> str:
    """A random value for :data:`SECRET_ENV` and the canary, one per test session."""
    import secrets

    return _SESSION.setdefault("secret", secrets.token_hex(12))


def healthy_runs(tmp_path_factory) -> dict[str, Path]:
    """The healthy training and walkthrough runs every case starts from, made once per test
    session (pytest's ``tmp_path_factory``) and shared by the test modules that use them."""
    if "healthy" not in _SESSION:
        base = tmp_path_factory.mktemp("healthy")
        _SESSION["healthy"] = {"train": make_healthy_run(base / "train"),
                               "walkthrough": make_healthy_run(base / "walkthrough", WALK_OVERRIDES)}
    return _SESSION["healthy"]


def outside_folder(tmp_path_factory) -> Path:
    """The folder outside every run dir (canary, victim), once per test session."""
    if "outside" not in _SESSION:
        _SESSION["outside"] = make_outside(tmp_path_factory.mktemp("outside"), session_secret())
    return _SESSION["outside"]


def make_outside(folder: Path, secret: str) -> Path:
    """The folder beside the run dirs that no case may read or write: a canary, a victim."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CANARY).write_text(f"CANARY-{secret}\n", encoding="utf-8")
    (folder / VICTIM).write_text("the victim's own text\n", encoding="utf-8")
    return folder


# ----------------------------------------------------------------------------- outcomes
@dataclass(frozen=True)
class Raises:
    """The reader raises RunFileError ``<run>/<file>: ...fragment...`` (one line);
    MissingRunFile when ``missing``."""

    file: str
    fragment: str
    missing: bool = False


@dataclass(frozen=True)
class Gives:
    """The reader returns a result whose ``view`` equals ``expected``."""

    view: Callable[[Any], Any]
    expected: Any


@dataclass(frozen=True)
class Case:
    name: str
    kind: str
    build: Callable[[Path, Path], None]  # (run dir copy, outside folder): damage the copy
    reader: str  # a key of READERS
    outcome: Raises | Gives
    base: str = "train"  # which healthy run it starts from: train or walkthrough
    reproduce: str | None = None  # fragment of attnlab-reproduce's one-line error (exit 2); None: not run
    limit: int | None = None  # the reader's limit, when not the default (scaled-down bombs)
    max_read: int | None = None  # bound on bytes read from the run dir (None: the run dir's size)
    max_decompressed: int = 64 * 1024  # bound on .npz bytes decompressed
    note: str = ""


def _limit(case_limit: int | None, default: int) -> int:
    return default if case_limit is None else case_limit


READERS: dict[str, Callable[[Path, int | None], Any]] = {
    "config": lambda run, lim: S.read_config(run, _limit(lim, S.CONFIG_LIMIT)),
    "overrides": lambda run, lim: S.read_overrides(run, _limit(lim, S.CONFIG_LIMIT)),
    "job_num": lambda run, lim: S.read_job_num(run, _limit(lim, S.CONFIG_LIMIT)),
    "summary": lambda run, lim: S.read_summary(run, _limit(lim, S.SUMMARY_LIMIT)),
    "metrics": lambda run, lim: S.read_run_metrics(run, _limit(lim, S.METRICS_LIMIT)),
    "attention": lambda run, lim: S.read_attention(run, limit=_limit(lim, S.NPZ_LIMIT)),
    "last_snapshot": lambda run, lim: S.read_last_snapshot(run, _limit(lim, S.NPZ_LIMIT)),
    "walkthrough": lambda run, lim: S.read_walkthrough(run, _limit(lim, S.NPZ_LIMIT)),
}


# ----------------------------------------------------------------------------- building blocks
def edit(rel: str, old: str, new: str, count: int = 1) -> Callable[[Path, Path], None]:
    """Replace ``old`` (which must be there) by ``new`` in the text file ``rel``; ``{outside}``
    in ``new`` is the outside folder."""
    def build(run: Path, outside: Path) -> None:
        path = run / rel
        text = path.read_text(encoding="utf-8")
        assert old in text, (rel, old)
        path.write_text(text.replace(old, new.replace("{outside}", str(outside)), count), encoding="utf-8")
    return build


def put(rel: str, content: str | bytes | Callable[[Path], str | bytes]) -> Callable[[Path, Path], None]:
    """Write ``content`` (or ``content(run)``) into ``rel``, replacing the file."""
    def build(run: Path, outside: Path) -> None:
        data = content(run) if callable(content) else content
        path = run / rel
        path.unlink(missing_ok=True)
        path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return build


def summary_with(**fields: Any) -> Callable[[Path, Path], None]:
    """summary.json with ``fields`` changed (written as Python's json writes them)."""
    def build(run: Path, outside: Path) -> None:
        data = json.loads((run / SUMMARY).read_text(encoding="utf-8"))
        data.update(fields)
        (run / SUMMARY).write_text(json.dumps(data), encoding="utf-8")
    return build


def versions_with(**fields: Any) -> Callable[[Path, Path], None]:
    def build(run: Path, outside: Path) -> None:
        data = json.loads((run / SUMMARY).read_text(encoding="utf-8"))
        data["versions"].update(fields)
        (run / SUMMARY).write_text(json.dumps(data), encoding="utf-8")
    return build


def symlink(rel: str, target: Callable[[Path, Path], str | Path]) -> Callable[[Path, Path], None]:
    def build(run: Path, outside: Path) -> None:
        path = run / rel
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
        os.symlink(target(run, outside), path)
    return build


def sparse(rel: str, size: int) -> Callable[[Path, Path], None]:
    """``rel`` replaced by a sparse file of ``size`` bytes (costs no disk, reads as zeros)."""
    def build(run: Path, outside: Path) -> None:
        path = run / rel
        path.unlink(missing_ok=True)
        with open(path, "wb") as f:
            f.truncate(size)
    return build


def fifo(rel: str) -> Callable[[Path, Path], None]:
    def build(run: Path, outside: Path) -> None:
        (run / rel).unlink()
        os.mkfifo(run / rel)
    return build


def unix_socket(rel: str) -> Callable[[Path, Path], None]:
    def build(run: Path, outside: Path) -> None:
        (run / rel).unlink()
        cwd = os.getcwd()
        os.chdir((run / rel).parent)  # AF_UNIX paths are limited to ~107 bytes: bind a relative name
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(Path(rel).name)
            s.close()
        finally:
            os.chdir(cwd)
    return build


def char_device(rel: str) -> Callable[[Path, Path], None]:
    def build(run: Path, outside: Path) -> None:
        (run / rel).unlink()
        try:
            os.mknod(run / rel, 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # what /dev/zero is
        except (PermissionError, OSError) as err:
            raise Unsupported(f"mknod: {err}") from None
    return build


def hardlink_outside(rel: str) -> Callable[[Path, Path], None]:
    def build(run: Path, outside: Path) -> None:
        (run / rel).unlink()
        target = outside / f"hardlinked-{os.getpid()}-{abs(hash(str(run)))}.txt"  # its own file: exactly 2 links
        target.write_text((outside / CANARY).read_text(encoding="utf-8"), encoding="utf-8")
        try:
            os.link(target, run / rel)
        except OSError as err:
            raise Unsupported(f"link: {err}") from None
    return build


def truncate_to(rel: str, keep: Callable[[int], int]) -> Callable[[Path, Path], None]:
    def build(run: Path, outside: Path) -> None:
        data = (run / rel).read_bytes()
        (run / rel).write_bytes(data[: keep(len(data))])
    return build


def metrics_lines(change: Callable[[list[str]], list[str]], newline: str = "\n") -> Callable[[Path, Path], None]:
    def build(run: Path, outside: Path) -> None:
        lines = (run / METRICS).read_text(encoding="utf-8").splitlines()
        (run / METRICS).write_bytes(newline.join(change(lines)).encode("utf-8") + newline.encode())
    return build


def _set(lines: list[str], i: int, text: str) -> list[str]:
    lines = list(lines)
    lines[i] = text
    return lines


# npz members as bytes ---------------------------------------------------------------------
def npy_bytes(arr: np.ndarray, **kw: Any) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, **kw)
    return buf.getvalue()


def npy_header(shape: tuple[int, ...], descr: str = "<f4", fortran: bool = False) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": fortran, "shape": shape})
    return buf.getvalue()


def healthy_arrays(run: Path, name: str = ATTENTION) -> dict[str, np.ndarray]:
    """The arrays of our own healthy run (trusted: written by the runner a moment ago)."""
    with np.load(run / name) as f:
        return {k: f[k] for k in f.files}


def npz_with(name: str = ATTENTION, compressed: bool = False, drop: tuple[str, ...] = (),
             **arrays: Callable[[dict[str, np.ndarray]], Any]) -> Callable[[Path, Path], None]:
    """The run's .npz rewritten with np.savez: each keyword is a function of the healthy arrays
    giving the new member (raw ``bytes`` are written as the member's .npy bytes)."""
    def build(run: Path, outside: Path) -> None:
        old = healthy_arrays(run, name)
        new = {k: v for k, v in old.items() if k not in drop}
        raw = {}
        for k, fn in arrays.items():
            value = fn(old) if callable(fn) else fn
            if isinstance(value, bytes):
                raw[k] = value
            else:
                new[k] = value
        path = run / name
        path.unlink()
        method = zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED
        with zipfile.ZipFile(path, "w", compression=method) as zf:
            for k, v in new.items():
                zf.writestr(f"{k}.npy", raw.get(k, npy_bytes(np.asanyarray(v), allow_pickle=True)))
            for k, v in raw.items():
                if k not in new:
                    zf.writestr(f"{k}.npy", v)
    return build


def raw_zip(entries: list[tuple[str, bytes, int, int, int, int]]) -> bytes:
    """A zip written byte by byte: entries of (name, payload as stored, method, declared
    uncompressed size, CRC-32, flag bits), so the sizes, CRCs and flags can lie."""
    out, central = bytearray(), bytearray()
    for name, payload, method, size, crc, flags in entries:
        offset = len(out)
        n = name.encode("utf-8")
        out += struct.pack("<4s2B4HL2L2H", b"PK\x03\x04", 20, 0, flags, method, 0, 0x21, crc, len(payload), size,
                           len(n), 0) + n + payload
        central += struct.pack("<4s4B4HL2L5H2L", b"PK\x01\x02", 20, 3, 20, 0, flags, method, 0, 0x21, crc,
                               len(payload), size, len(n), 0, 0, 0, 0, 0, offset) + n
    eocd = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, len(entries), len(entries), len(central), len(out), 0)
    return bytes(out + central + eocd)


def deflate(chunks) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    return b"".join(c.compress(ch) for ch in chunks) + c.flush()


def attention_raw(weights: Callable[[dict[str, np.ndarray]], tuple[bytes, int, int, int, int]],
                  extra: Callable[[dict[str, np.ndarray]], list] | None = None) -> Callable[[Path, Path], None]:
    """attention.npz as a raw zip: the healthy steps/tokens/token_ids stored, and ``weights``
    given as (payload, method, declared size, crc, flags)."""
    def build(run: Path, outside: Path) -> None:
        a = healthy_arrays(run)
        entries = []
        for k in ("steps", "tokens", "token_ids"):
            data = npy_bytes(a[k])
            entries.append((f"{k}.npy", data, zipfile.ZIP_STORED, len(data), zlib.crc32(data), 0))
        entries.append(("weights.npy", *weights(a)))
        entries += extra(a) if extra else []
        (run / ATTENTION).write_bytes(raw_zip(entries))
    return build


def stored(data: bytes, flags: int = 0) -> tuple[bytes, int, int, int, int]:
    return data, zipfile.ZIP_STORED, len(data), zlib.crc32(data), flags


def zeros_bomb(shape: tuple[int, ...]) -> Callable[[dict], tuple[bytes, int, int, int, int]]:
    """A deflated weights member that really holds ``shape`` float32 zeros (deflate: ~1000:1)."""
    def make(a: dict) -> tuple[bytes, int, int, int, int]:
        header = npy_header(shape)
        n = int(np.prod(shape)) * 4
        chunk = bytes(1 << 20)
        crc = zlib.crc32(header)
        pieces = [header]
        left = n
        while left:
            piece = chunk[: min(left, len(chunk))]
            pieces.append(piece)
            crc = zlib.crc32(piece, crc)
            left -= len(piece)
        return deflate(pieces), zipfile.ZIP_DEFLATED, len(header) + n, crc, 0
    return make


def flip_byte(rel: str, member: str, offset_in_data: Callable[[int], int]) -> Callable[[Path, Path], None]:
    """Flip one byte of a stored member's data (its CRC then disagrees)."""
    def build(run: Path, outside: Path) -> None:
        path = run / rel
        with zipfile.ZipFile(path) as zf:
            info = zf.getinfo(member)
        data = bytearray(path.read_bytes())
        name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26: info.header_offset + 30])
        start = info.header_offset + 30 + name_len + extra_len
        data[start + offset_in_data(info.file_size)] ^= 0xFF
        path.write_bytes(bytes(data))
    return build


def pickle_payload(outside: Path) -> np.ndarray:
    class Payload:  # unpickling it would create outside/pwned
        def __reduce__(self):
            return (Path.touch, (outside / PWNED,))
    arr = np.empty(1, dtype=object)
    arr[0] = Payload()
    return arr


def object_weights(run: Path, outside: Path) -> None:
    npz_with(weights=lambda a: npy_bytes(pickle_payload(outside), allow_pickle=True))(run, outside)


def many_members(n: int) -> Callable[[Path, Path], None]:
    def build(run: Path, outside: Path) -> None:
        a = healthy_arrays(run)
        entries = [(f"{k}.npy", npy_bytes(v), zipfile.ZIP_STORED, len(npy_bytes(v)), zlib.crc32(npy_bytes(v)), 0)
                   for k, v in a.items()]
        entries += [(f"x{i}.npy", b"", zipfile.ZIP_STORED, 0, 0, 0) for i in range(n - len(entries))]
        (run / ATTENTION).write_bytes(raw_zip(entries))
    return build


def npy_custom(header_text: str, data: bytes = b"", version: int = 1) -> bytes:
    """A .npy member with a hand-written header text (padded as numpy pads)."""
    text = header_text.encode("latin1")
    pad = (-(10 + len(text) + 1)) % 64
    body = text + b" " * pad + b"\n"
    if version == 1:
        return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(body)) + body + data
    return b"\x93NUMPY" + bytes([version, 0]) + struct.pack("<I", len(body)) + body + data


def billion_laughs() -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi"):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def interpolation_bomb() -> str:
    keys = [f"b{i}: ${{b{i + 1}}}${{b{i + 1}}}" for i in range(30)] + ["b30: lol"]
    return "\n".join(keys) + "\n"


def reference_chain(n: int) -> str:
    return "\n".join([f"r{i}: ${{r{i + 1}}}" for i in range(n)] + [f"r{n}: 1"]) + "\n"


def prepend(rel: str, text: str) -> Callable[[Path, Path], None]:
    def build(run: Path, outside: Path) -> None:
        path = run / rel
        path.write_text(text.replace("{outside}", str(outside)) + path.read_text(encoding="utf-8"), encoding="utf-8")
    return build


def both(*builds: Callable[[Path, Path], None]) -> Callable[[Path, Path], None]:
    def build(run: Path, outside: Path) -> None:
        for b in builds:
            b(run, outside)
    return build


def keys_of_special(data: Any) -> list[str]:
    return [k for k, _ in S.special_keys(data)]


def printed(field: str, limit: int = S.TEXT_LIMIT) -> Callable[[dict], str]:
    return lambda summary: S.printable(summary[field], limit)


ESCAPES = "boom \x1b]0;pwned\x07\x1b[2J\x1b[3J\x1bc"  # set the terminal title, clear screen and scrollback, reset
ESCAPES_SHOWN = "boom \\x1b]0;pwned\\x07\\x1b[2J\\x1b[3J\\x1bc"
REPRO_TARGET = "a saved config may name a _target_ only at optimizer._target_"
RESOLVER = "resolvers never run on a shared config"
WHOLE = "only a whole-string ${key.path} reference to another key is allowed"
LINK = "is a symbolic link (refused: a run dir holds no links)"
NOT_ZIP = "not a zip archive (an .npz is one; empty or truncated?)"
T_HEADER = 128  # bytes of a .npy v1.0 header as numpy writes it for these shapes

# ----------------------------------------------------------------------------- the corpus
CASES: list[Case] = [
    # -- 1. code in a saved config: data only, _target_ refused anywhere but optimizer._target_
    Case("target_in_optimizer_betas_item", "code",
         edit(CONFIG, "  betas:\n  - 0.9\n", "  betas:\n  - _target_: builtins.open\n    _args_:\n    - {outside}/victim.txt\n"
              "    - w\n"), "config",
         Gives(keys_of_special, ["optimizer._target_", "optimizer.betas[0]._target_", "optimizer.betas[0]._args_"]),
         reproduce=f"optimizer.betas[0]._target_='builtins.open': {REPRO_TARGET}"),
    Case("target_in_model", "code", edit(CONFIG, "  d_k: 4\n", "  d_k: 4\n  _target_: os.system\n"), "config",
         Gives(keys_of_special, ["model._target_", "optimizer._target_"]),
         reproduce=f"model._target_='os.system': {REPRO_TARGET}"),
    Case("target_at_root", "code", prepend(CONFIG, "_target_: os.system\n_args_:\n- touch {outside}/pwned\n"), "config",
         Gives(lambda d: keys_of_special(d)[:2], ["_target_", "_args_"]),
         reproduce=f"_target_='os.system': {REPRO_TARGET}"),
    Case("target_deep_in_train", "code",
         edit(CONFIG, "  focus_token: 1\n", "  focus_token:\n    deep:\n    - x:\n        _target_: builtins.exec\n"),
         "config", Gives(lambda d: S.special_keys(d)[-1], ("train.focus_token.deep[0].x._target_", "builtins.exec")),
         reproduce=f"train.focus_token.deep[0].x._target_='builtins.exec': {REPRO_TARGET}"),
    Case("partial_in_optimizer", "code", edit(CONFIG, "  lr: 0.05\n", "  lr: 0.05\n  _partial_: true\n"), "config",
         Gives(keys_of_special, ["optimizer._target_", "optimizer._partial_"]),
         reproduce=f"optimizer._partial_=True: {REPRO_TARGET}"),
    Case("target_under_a_dotted_escaped_key", "code", prepend(CONFIG, '"a.b[0]\\e[2J":\n  _target_: os.system\n'), "config",
         Gives(lambda d: S.special_keys(d)[0], ("a.b[0]\x1b[2J._target_", "os.system")),
         reproduce=f"a.b[0]\\x1b[2J._target_='os.system': {REPRO_TARGET}"),
    Case("optimizer_target_not_shipped", "code", edit(CONFIG, "torch.optim.Adam", "os.system"), "config",
         Gives(lambda d: d["optimizer"]["_target_"], "os.system"),
         reproduce="optimizer._target_='os.system': must be one of the shipped optimizers"),
    Case("hydra_callback_section", "code",
         prepend(CONFIG, "hydra:\n  callbacks:\n    x:\n      _target_: os.system\n"), "config",
         Gives(lambda d: S.special_keys(d)[0], ("hydra.callbacks.x._target_", "os.system")),
         reproduce=f"hydra.callbacks.x._target_='os.system': {REPRO_TARGET}"),
    Case("text_file_names_a_file_outside", "code",
         edit(CONFIG, "text_file: null", "text_file: {outside}/canary.txt"), "config",
         Gives(lambda d: d["text_file"].endswith("canary.txt"), True),
         reproduce="a shared config does not choose which file of this machine is read; pass --text-file FILE"),

    # -- 1. secrets: no interpolation is resolved; only plain references are copied
    Case("oc_env_secret_in_sentence", "secret",
         edit(CONFIG, "sentence: Your journey starts with one step", "sentence: ${oc.env:ATTNLAB_CANARY_SECRET}"),
         "config", Raises(CONFIG, f"sentence holds an interpolation (${{oc.env:{SECRET_ENV}}}); {RESOLVER}"),
         reproduce=f"sentence holds an interpolation (${{oc.env:{SECRET_ENV}}}); {RESOLVER}"),
    Case("oc_env_with_default_in_int", "secret", edit(CONFIG, "  d_model: 6", "  d_model: ${oc.env:HOME,6}"),
         "config", Raises(CONFIG, f"model.d_model holds an interpolation (${{oc.env:HOME,6}}); {RESOLVER}"),
         reproduce=f"model.d_model holds an interpolation (${{oc.env:HOME,6}}); {RESOLVER}"),
    Case("oc_decode", "secret", edit(CONFIG, "  d_k: 4", "  d_k: ${oc.decode:'4'}"), "config",
         Raises(CONFIG, f"model.d_k holds an interpolation (${{oc.decode:'4'}}); {RESOLVER}"),
         reproduce=f"model.d_k holds an interpolation (${{oc.decode:'4'}}); {RESOLVER}"),
    Case("now_resolver", "secret", edit(CONFIG, "seed: 42", "seed: ${now:%s}"), "config",
         Raises(CONFIG, f"seed holds an interpolation (${{now:%s}}); {RESOLVER}"), reproduce=RESOLVER),
    Case("attnlab_own_resolver", "secret", edit(CONFIG, "device: cpu", "device: ${attnlab.job_dir:1,x}"), "config",
         Raises(CONFIG, f"device holds an interpolation (${{attnlab.job_dir:1,x}}); {RESOLVER}"), reproduce=RESOLVER),
    Case("resolver_nested_in_select", "secret",
         edit(CONFIG, "  encoding: gpt2", "  encoding: ${oc.select:model.x,${oc.env:ATTNLAB_CANARY_SECRET}}"), "config",
         Raises(CONFIG, f"tokenizer.encoding holds an interpolation (${{oc.select:model.x,${{oc.env:{SECRET_ENV}}}}}); "
                f"{RESOLVER}"), reproduce=RESOLVER),
    # OmegaConf's escape: text, as Hydra saves `attnlab 'sentence=costs ${price} today'`; nothing is resolved
    Case("escaped_interpolation_is_text", "secret",
         edit(CONFIG, "sentence: Your journey starts with one step", "sentence: \\${oc.env:HOME}"), "config",
         Gives(lambda d: d["sentence"], "${oc.env:HOME}")),
    Case("escaped_backslash_then_interpolation", "secret",
         edit(CONFIG, "sentence: Your journey starts with one step", "sentence: \\\\${oc.env:HOME}"), "config",
         Raises(CONFIG, f"sentence holds an interpolation (\\\\${{oc.env:HOME}}); {RESOLVER}"), reproduce=RESOLVER),
    Case("text_around_a_reference", "secret",
         edit(CONFIG, "sentence: Your journey starts with one step", "sentence: 'x ${model.d_model}'"), "config",
         Raises(CONFIG, f"sentence holds an interpolation (x ${{model.d_model}}); {WHOLE}"), reproduce=WHOLE),
    Case("relative_reference", "secret", edit(CONFIG, "  d_v: ${model.d_model}", "  d_v: ${.d_model}"), "config",
         Raises(CONFIG, f"model.d_v holds an interpolation (${{.d_model}}); {WHOLE}"), reproduce=WHOLE),
    Case("nested_interpolation", "secret", edit(CONFIG, "  d_v: ${model.d_model}", "  d_v: ${${model.x}}"), "config",
         Raises(CONFIG, f"model.d_v holds an interpolation (${{${{model.x}}}}); {WHOLE}"), reproduce=WHOLE),
    Case("interpolation_bomb", "bomb", prepend(CONFIG, interpolation_bomb()), "config",
         Raises(CONFIG, f"b0 holds an interpolation (${{b1}}${{b1}}); {WHOLE}"), reproduce=WHOLE,
         note="30 doubling levels: 2**30 copies if it were ever expanded"),
    Case("reference_chain_bomb", "bomb", prepend(CONFIG, reference_chain(40)), "config",
         Raises(CONFIG, f"r0: a chain of more than {S.REFERENCE_CHAIN} references"), reproduce="a chain of more than"),
    Case("reference_cycle", "secret",
         both(edit(CONFIG, "  d_k: 4", "  d_k: ${model.d_v}"), edit(CONFIG, "  d_v: ${model.d_model}", "  d_v: ${model.d_k}")),
         "config", Raises(CONFIG, "model.d_k: the references model.d_k -> model.d_v -> model.d_k form a cycle"),
         reproduce="form a cycle"),
    Case("reference_to_a_section", "secret", edit(CONFIG, "  d_v: ${model.d_model}", "  d_v: ${model}"), "config",
         Raises(CONFIG, "model.d_v refers to model, a section; only a value can be referred to"),
         reproduce="a section"),
    Case("reference_to_a_missing_key", "secret", edit(CONFIG, "  d_v: ${model.d_model}", "  d_v: ${model.nope}"),
         "config", Raises(CONFIG, "model.d_v refers to model.nope, which the config does not have"),
         reproduce="which the config does not have"),
    Case("plain_reference_is_copied", "secret", lambda run, outside: None, "config",
         Gives(lambda d: (d["model"]["d_v"], S.interpolations(d)), (6, [])),
         note="Hydra saves d_v: ${model.d_model} in every run"),
    Case("reference_chain_within_bound", "secret", edit(CONFIG, "  d_k: 4", "  d_k: ${model.d_v}"), "config",
         Gives(lambda d: (d["model"]["d_k"], d["model"]["d_v"]), (6, 6))),

    # -- 1. YAML that costs without bound, and YAML that is not plain data
    Case("billion_laughs", "bomb", put(CONFIG, billion_laughs()), "config",
         Raises(CONFIG, f"refused YAML: aliases expand to more than {S.YAML_MAX_NODES} nodes"),
         reproduce="aliases expand to more than", note="~1 KB; 9**9 strings if expanded"),
    Case("billion_laughs_in_hydra_yaml", "bomb", put(HYDRA, billion_laughs()), "job_num",
         Raises(HYDRA, f"refused YAML: aliases expand to more than {S.YAML_MAX_NODES} nodes")),
    Case("recursive_alias", "bomb", put(CONFIG, "a: &a [*a]\n"), "config",
         Raises(CONFIG, "refused YAML: a recursive alias (a node that contains itself)"), reproduce="a recursive alias"),
    Case("deep_nesting", "bomb", put(CONFIG, "a: " + "[" * 10000 + "]" * 10000 + "\n"), "config",
         Raises(CONFIG, f"refused YAML: nested deeper than {S.YAML_MAX_DEPTH} levels"), reproduce="nested deeper"),
    Case("too_many_nodes", "bomb", put(CONFIG, "a: [" + "1," * 30000 + "1]\n"), "config",
         Raises(CONFIG, f"refused YAML: more than {S.YAML_MAX_NODES} YAML nodes"), reproduce="YAML nodes"),
    Case("config_50_mb", "bomb", sparse(CONFIG, 50 * 1024 * 1024), "config",
         Raises(CONFIG, f"is 52428800 bytes, more than the limit of {S.CONFIG_LIMIT} bytes"), max_read=0,
         reproduce=f"is 52428800 bytes, more than the limit of {S.CONFIG_LIMIT} bytes"),
    Case("python_tag", "code", edit(CONFIG, "seed: 42", "seed: !!python/object/apply:os.system ['touch {outside}/pwned']"),
         "config", Raises(CONFIG, "refused YAML: tag tag:yaml.org,2002:python/object/apply:os.system (line 2)"),
         reproduce="refused YAML: tag tag:yaml.org,2002:python/object/apply:os.system"),
    Case("custom_tag", "code", edit(CONFIG, "seed: 42", "seed: !env ATTNLAB_CANARY_SECRET"), "config",
         Raises(CONFIG, "refused YAML: tag !env (line 2); allowed: null, bool, int, float, str, seq, map"),
         reproduce="refused YAML: tag !env"),
    Case("binary_tag", "code", edit(CONFIG, "sentence: Your journey starts with one step", "sentence: !!binary aGVsbG8="),
         "config", Raises(CONFIG, "refused YAML: tag tag:yaml.org,2002:binary (line 3)")),
    Case("set_tag", "code", edit(CONFIG, "analysis:\n", "analysis: !!set\n"), "config",
         Raises(CONFIG, "refused YAML: tag tag:yaml.org,2002:set")),
    Case("merge_key", "code", edit(CONFIG, "model:\n  d_model: 6\n", "model:\n  <<: {d_model: 6}\n"), "config",
         Raises(CONFIG, "refused YAML: merge key '<<' (line 12)"), reproduce="merge key"),
    Case("duplicate_key", "code", edit(CONFIG, "seed: 42\n", "seed: 42\nseed: 7\n"), "config",
         Raises(CONFIG, "refused YAML: duplicate key seed (line 3)"), reproduce="duplicate key seed"),
    Case("config_not_utf8", "damaged", put(CONFIG, b"task: train\nsentence: \xff\xfe\n"), "config",
         Raises(CONFIG, "not UTF-8 text (byte 22: invalid start byte)"), reproduce="not UTF-8 text"),
    Case("config_two_documents", "damaged", prepend(CONFIG, "a: 1\n---\n"), "config",
         Raises(CONFIG, "not valid YAML (line 2: but found another document)"), reproduce="not valid YAML"),
    Case("config_syntax_error", "damaged", put(CONFIG, "model: [unclosed\n"), "config",
         Raises(CONFIG, "expected ',' or ']'"), reproduce="not valid YAML"),  # libyaml: "did not find ..."
    Case("config_control_character", "damaged", put(CONFIG, "seed: 4\x072\n"), "config",  # BEL: a traceback before
         Raises(CONFIG, "not valid YAML (unacceptable character #x0007"), reproduce="unacceptable character"),
    Case("config_is_a_list", "damaged", put(CONFIG, "- a\n- b\n"), "config",
         Raises(CONFIG, "not a config (a YAML mapping is expected, found a list)"), reproduce="not a config"),
    Case("config_empty", "damaged", put(CONFIG, ""), "config",
         Raises(CONFIG, "not a config (a YAML mapping is expected, found null)"), reproduce="not a config"),
    Case("config_huge_int", "bomb", edit(CONFIG, "seed: 42", "seed: " + "9" * 5000), "config",
         Raises(CONFIG, "refused YAML: a number of 5000 characters (line "), reproduce="a number of 5000 characters"),
    # YAML 1.1 base 60: 80,000 parts took ~5 CPU s and made an int too long to print (a traceback later)
    Case("config_sexagesimal_int", "bomb", edit(CONFIG, "seed: 42", "seed: 1" + ":59" * 80_000), "config",
         Raises(CONFIG, "refused YAML: a number of 240001 characters (line "), reproduce="a number of 240001"),
    Case("config_hex_int_too_long_to_print", "bomb", edit(CONFIG, "seed: 42", "seed: 0x" + "f" * 4000), "config",
         Raises(CONFIG, "refused YAML: an integer of 16000 bits (line "), reproduce="an integer of 16000 bits"),
    Case("config_bool_tag_not_a_bool", "damaged", edit(CONFIG, "seed: 42", 'seed: !!bool "maybe"'), "config",
         Raises(CONFIG, "refused YAML: not a bool: 'maybe' (line "), reproduce="not a bool"),  # was a KeyError traceback
    Case("config_int_tag_empty", "damaged", edit(CONFIG, "seed: 42", 'seed: !!int ""'), "config",
         Raises(CONFIG, "refused YAML: not an int: '' (line "), reproduce="not an int"),  # was an IndexError traceback
    Case("null_key", "damaged", prepend(CONFIG, "null: x\n"), "config",
         Raises(CONFIG, "refused YAML: a mapping key that is not a string (None, line 1)"), reproduce="not a string"),
    Case("yaml_11_bool_key", "damaged", prepend(CONFIG, "yes: x\n"), "config",
         Raises(CONFIG, "refused YAML: a mapping key that is not a string (True, line 1)")),
    Case("missing_value_marker", "damaged", edit(CONFIG, "seed: 42", "seed: ???"), "config",
         Gives(lambda d: d["seed"], "???"), reproduce="seed='???': a missing value in a saved config",
         note="merged onto the schema, ??? would silently become the default seed"),
    Case("date_stays_text", "value", edit(CONFIG, "  compare_sentence: null", "  compare_sentence: 2024-01-01"), "config",
         Gives(lambda d: d["analysis"]["compare_sentence"], "2024-01-01")),
    Case("float_without_dot", "value", edit(CONFIG, "  loss_threshold: 0.001", "  loss_threshold: 1e-3"), "config",
         Gives(lambda d: d["train"]["loss_threshold"], 0.001)),
    Case("overrides_not_a_list", "damaged", put(OVERRIDES, "a: 1\n"), "overrides",
         Raises(OVERRIDES, "not a list of override strings")),
    Case("overrides_with_escapes", "text", put(OVERRIDES, '- "sentence=\\e]0;pwned\\a\\e[2J"\n'), "overrides",
         Gives(lambda o: [S.printable(x) for x in o], ["sentence=\\x1b]0;pwned\\x07\\x1b[2J"])),

    # -- 1. not a regular file, or a link out of the run dir
    Case("summary_symlink_to_dev_zero", "file", symlink(SUMMARY, lambda r, o: "/dev/zero"), "summary",
         Raises(SUMMARY, LINK), max_read=0, reproduce=LINK),
    Case("summary_fifo", "file", fifo(SUMMARY), "summary",
         Raises(SUMMARY, "is a FIFO (named pipe), not a regular file (refused)"), max_read=0, reproduce="is a FIFO"),
    Case("summary_is_a_directory", "file", both(lambda r, o: (r / SUMMARY).unlink(), lambda r, o: (r / SUMMARY).mkdir()),
         "summary", Raises(SUMMARY, "is a directory, not a regular file (refused)"), max_read=0),
    Case("summary_socket", "file", unix_socket(SUMMARY), "summary",
         Raises(SUMMARY, "is a socket, not a regular file (refused)"), max_read=0),
    Case("summary_char_device", "file", char_device(SUMMARY), "summary",
         Raises(SUMMARY, "is a character device, not a regular file (refused)"), max_read=0,
         note="needs mknod (root); skipped elsewhere"),
    Case("summary_missing", "file", lambda r, o: (r / SUMMARY).unlink(), "summary",
         Raises(SUMMARY, "missing", missing=True), max_read=0, reproduce="summary.json: missing (the run never started)"),
    Case("config_symlink_outside", "file", symlink(CONFIG, lambda r, o: o / CANARY), "config", Raises(CONFIG, LINK),
         max_read=0, reproduce=LINK),
    Case("overrides_symlink_outside", "file", symlink(OVERRIDES, lambda r, o: o / CANARY), "overrides",
         Raises(OVERRIDES, LINK), max_read=0, note="copied an outside file's contents into the CSV"),
    Case("hydra_folder_symlink_outside", "file",
         both(lambda r, o: shutil.copytree(r / ".hydra", o / "hydra_copy", dirs_exist_ok=True),
              symlink(".hydra", lambda r, o: o / "hydra_copy")), "config",
         Raises(CONFIG, "its folder .hydra is a symbolic link (refused: a run dir holds no links)"), max_read=0,
         reproduce="its folder .hydra is a symbolic link"),
    Case("metrics_symlink_inside_the_run", "file",
         both(lambda r, o: shutil.copy(r / METRICS, r / "metrics.real"), symlink(METRICS, lambda r, o: "metrics.real")),
         "metrics", Raises(METRICS, LINK), max_read=0, reproduce=LINK, note="any link is refused, even one inside"),
    Case("metrics_hard_link_to_outside", "file", hardlink_outside(METRICS), "metrics",
         Raises(METRICS, "has 2 hard links (refused: it may be a file outside the run dir)"), max_read=0,
         reproduce="has 2 hard links"),
    Case("attention_symlink", "file", symlink(ATTENTION, lambda r, o: o / CANARY), "attention", Raises(ATTENTION, LINK),
         max_read=0, reproduce=LINK),
    Case("metrics_100_mb", "bomb", sparse(METRICS, 100 * 1024 * 1024), "metrics",
         Raises(METRICS, f"is 104857600 bytes, more than the limit of {S.METRICS_LIMIT} bytes"), max_read=0,
         reproduce="more than the limit"),
    Case("attention_1_5_gb", "bomb", sparse(ATTENTION, 1536 * 1024 * 1024), "attention",
         Raises(ATTENTION, f"is 1610612736 bytes, more than the limit of {S.NPZ_LIMIT} bytes"), max_read=0,
         reproduce="more than the limit"),
    Case("summary_2_mb", "bomb", put(SUMMARY, lambda r: json.dumps({"status": "completed", "x": "a" * 2 * 1024 * 1024})),
         "summary", Raises(SUMMARY, f"is 2097184 bytes, more than the limit of {S.SUMMARY_LIMIT} bytes"), max_read=0),

    # -- 2. summary.json of the wrong shape or types
    Case("summary_is_a_list", "summary", put(SUMMARY, "[1, 2]"), "summary", Raises(SUMMARY, "is a list, expected an object"),
         reproduce="summary.json: is a list, expected an object"),
    Case("summary_is_a_string", "summary", put(SUMMARY, '"completed"'), "summary",
         Raises(SUMMARY, "is a str, expected an object"), reproduce="is a str, expected an object"),
    Case("summary_is_null", "summary", put(SUMMARY, "null"), "summary", Raises(SUMMARY, "is null, expected an object"),
         reproduce="is null, expected an object"),
    Case("summary_is_a_number", "summary", put(SUMMARY, "3"), "summary", Raises(SUMMARY, "is an int, expected an object")),
    Case("final_loss_is_a_str", "summary", summary_with(final_loss="0.07"), "summary",
         Raises(SUMMARY, "final_loss is a str, expected a number or null"), reproduce="final_loss is a str, expected a number"),
    Case("steps_run_is_a_float", "summary", summary_with(steps_run=40.5), "summary",
         Raises(SUMMARY, "steps_run is a float, expected an integer")),
    Case("steps_run_is_a_bool", "summary", summary_with(steps_run=True), "summary",
         Raises(SUMMARY, "steps_run is a bool, expected an integer")),
    Case("status_is_an_int", "summary", summary_with(status=1), "summary", Raises(SUMMARY, "status is an int, expected a string"),
         reproduce="status is an int, expected a string"),
    Case("versions_is_a_list", "summary", summary_with(versions=["torch"]), "summary",
         Raises(SUMMARY, "versions is a list, expected an object or null")),
    Case("two_fields_wrong", "summary", summary_with(error={"a": 1}, wall_time_s="fast"), "summary",
         Raises(SUMMARY, "error is a dict, expected a string or null (+1 more)")),
    Case("summary_truncated", "summary", truncate_to(SUMMARY, lambda n: n // 2), "summary",
         Raises(SUMMARY, "not valid JSON (line "), reproduce="not valid JSON"),
    Case("summary_not_utf8", "summary", put(SUMMARY, b'{"status": "\xff"}'), "summary",
         Raises(SUMMARY, "not UTF-8 text (byte 12: invalid start byte)")),
    Case("summary_nested_40_deep", "bomb", put(SUMMARY, '{"x": ' + "[" * 40 + "]" * 40 + "}"), "summary",
         Raises(SUMMARY, f"nested deeper than {S.JSON_MAX_DEPTH} levels")),
    Case("summary_nested_100000_deep", "bomb", put(SUMMARY, "[" * 100000 + "]" * 100000), "summary",
         Raises(SUMMARY, f"nested deeper than {S.JSON_MAX_DEPTH} levels")),
    Case("summary_huge_int", "bomb", put(SUMMARY, '{"steps_run": ' + "9" * 5000 + "}"), "summary",
         Raises(SUMMARY, "refused JSON value (Exceeds the limit (4300 digits)")),
    Case("final_loss_nan_is_a_number", "value", summary_with(final_loss=float("nan"), status="diverged"), "summary",
         Gives(lambda s: repr(s["final_loss"]), "nan"), note="a diverged run's loss"),

    # -- 1. text that drives a terminal: read fine, printed escaped
    Case("summary_error_escape_sequences", "text", summary_with(error=ESCAPES), "summary",
         Gives(printed("error"), ESCAPES_SHOWN)),
    Case("failed_run_error_escape_sequences", "text", summary_with(status="failed", error=ESCAPES), "summary",
         Gives(printed("error"), ESCAPES_SHOWN), reproduce=f"summary.json: says failed: {ESCAPES_SHOWN}; nothing to reproduce"),
    Case("versions_escape_sequences", "text", versions_with(torch="\x1b[31m2.0\x1b[0m\u202e"), "summary",
         Gives(lambda s: S.printable(s["versions"]["torch"]), "\\x1b[31m2.0\\x1b[0m\\u202e")),
    Case("status_escape_sequences", "text", summary_with(status="\x1b[2Jrunning"), "summary",
         Gives(printed("status"), "\\x1b[2Jrunning"), reproduce="has unknown status '\\x1b[2Jrunning'"),
    Case("c1_csi_and_bidi", "text", summary_with(error="\x9b2J \u202etxt.exe \u2066x\u2069 \x00\x7f"), "summary",
         Gives(printed("error"), "\\x9b2J \\u202etxt.exe \\u2066x\\u2069 \\x00\\x7f")),
    Case("lone_surrogate", "text", put(SUMMARY, '{"status": "completed", "error": "x\\ud800y"}'), "summary",
         Gives(lambda s: S.printable(s["error"]).encode("utf-8"), b"x\\ud800y"), note="printing it raw raises UnicodeEncodeError"),
    Case("huge_single_line_error", "text", summary_with(error="A" * 300000), "summary",
         Gives(printed("error"), "A" * S.TEXT_LIMIT + "…[+299800 chars]")),
    Case("newlines_in_error", "text", summary_with(error="line1\nline2\r\n\tfake: row"), "summary",
         Gives(printed("error"), "line1\\nline2\\r\\n\\tfake: row")),
    Case("error_starts_a_spreadsheet_formula", "text", summary_with(error='=HYPERLINK("http://x","y")'), "summary",
         Gives(printed("error"), '=HYPERLINK("http://x","y")'), note="read as is; a CSV cell gets a leading '"),
    Case("summary_overrides_not_strings", "summary", summary_with(overrides=["seed=1", {"_target_": "os.system"}]),
         "summary", Raises(SUMMARY, "overrides holds a dict, expected strings"),
         reproduce="summary.json: overrides holds a dict, expected strings"),
    Case("summary_config_is_a_list", "summary", summary_with(config=["_target_: os.system"]), "summary",
         Raises(SUMMARY, "config is a list, expected an object or null"),
         reproduce="summary.json: config is a list, expected an object or null"),
    Case("refused_job_keeps_task_null", "value", summary_with(status="failed", task=None, config=None, steps_run=0,
                                                              error="model.d_model=0: must be a positive integer"),
         "summary", Gives(lambda s: (s["status"], s["task"], s["config"]), ("failed", None, None)),
         reproduce="summary.json: says failed: model.d_model=0: must be a positive integer; nothing to reproduce",
         note="what a job refused for a bad value leaves: task and config never set"),

    # -- 2. metrics.csv damaged
    Case("metrics_missing_loss_column", "metrics", metrics_lines(lambda ls: [line.split(",")[0] for line in ls]), "metrics",
         Raises(METRICS, "line 1: header must start with step,loss (found 'step')"), reproduce="header must start with step,loss"),
    Case("metrics_columns_swapped", "metrics", metrics_lines(lambda ls: _set(ls, 0, "loss,step")), "metrics",
         Raises(METRICS, "line 1: header must start with step,loss (found 'loss,step')")),
    Case("metrics_garbage_row", "metrics", metrics_lines(lambda ls: _set(ls, 5, "abc,def")), "metrics",
         Raises(METRICS, "line 6: step 'abc' is not a non-negative integer"), reproduce="line 6: step 'abc'"),
    Case("metrics_garbage_loss", "metrics", metrics_lines(lambda ls: _set(ls, 6, "5,banana")), "metrics",
         Raises(METRICS, "line 7: loss 'banana' is not a number")),
    Case("metrics_short_row", "metrics", metrics_lines(lambda ls: _set(ls, 8, "7")), "metrics",
         Raises(METRICS, "line 9: 1 field, expected at least 2 (step,loss)")),
    Case("metrics_nan_text", "value", metrics_lines(lambda ls: _set(ls, 6, "5,NaN")), "metrics",
         Gives(lambda r: (repr(float(r[1][5])), len(r[0])), ("nan", 40)), note="nan/inf as a diverged run writes them"),
    Case("metrics_empty", "metrics", put(METRICS, ""), "metrics", Raises(METRICS, "empty (no step,loss header)"),
         reproduce="empty (no step,loss header)"),
    Case("metrics_header_only", "value", put(METRICS, "step,loss\n"), "metrics", Gives(lambda r: (r[0].size, r[1].size), (0, 0))),
    Case("metrics_huge_single_line", "bomb", metrics_lines(lambda ls: _set(ls, 2, "1," + "9" * 1_000_000)), "metrics",
         Raises(METRICS, f"line 3: longer than {S.METRICS_LINE_LIMIT} bytes")),
    Case("metrics_steps_go_back", "metrics", metrics_lines(lambda ls: _set(_set(ls, 5, ls[6]), 6, ls[5])), "metrics",
         Raises(METRICS, "line 7: step 4 after step 5 (steps must increase)")),
    Case("metrics_negative_step", "metrics", metrics_lines(lambda ls: _set(ls, 1, "-1,0.5")), "metrics",
         Raises(METRICS, "line 2: step '-1' is not a non-negative integer")),
    Case("metrics_float_step", "metrics", metrics_lines(lambda ls: _set(ls, 1, "0.0,0.5")), "metrics",
         Raises(METRICS, "line 2: step '0.0' is not a non-negative integer")),
    Case("metrics_escape_in_row", "text", metrics_lines(lambda ls: _set(ls, 3, "\x1b]0;pwned\x07,1")), "metrics",
         Raises(METRICS, "line 4: step '\\x1b]0;pwned\\x07' is not a non-negative integer")),
    Case("metrics_crlf", "value", metrics_lines(lambda ls: ls, newline="\r\n"), "metrics",
         Gives(lambda r: (len(r[0]), int(r[0][-1])), (40, 39))),
    Case("metrics_extra_columns", "value", metrics_lines(lambda ls: [line + ",x" for line in ls]), "metrics",
         Gives(lambda r: len(r[0]), 40)),
    Case("metrics_not_utf8", "metrics", put(METRICS, b"step,loss\n0,\xff\n"), "metrics",
         Raises(METRICS, "not UTF-8 text (byte 12: invalid start byte)")),
    Case("metrics_deleted", "file", lambda r, o: (r / METRICS).unlink(), "metrics", Raises(METRICS, "missing", missing=True),
         reproduce="metrics.csv: missing", note="a completed training run without its metrics.csv"),

    # -- 2. attention.npz damaged
    Case("attention_truncated", "npz", truncate_to(ATTENTION, lambda n: n // 2), "attention", Raises(ATTENTION, NOT_ZIP),
         reproduce=NOT_ZIP),
    Case("attention_tail_cut", "npz", truncate_to(ATTENTION, lambda n: n - 10), "attention", Raises(ATTENTION, NOT_ZIP)),
    Case("attention_empty", "npz", put(ATTENTION, b""), "attention", Raises(ATTENTION, NOT_ZIP), reproduce=NOT_ZIP),
    Case("attention_not_a_zip", "npz", put(ATTENTION, "step,loss\n"), "attention", Raises(ATTENTION, NOT_ZIP)),
    Case("attention_crc_bad", "npz", flip_byte(ATTENTION, "weights.npy", lambda n: n - 1), "attention",
         Raises(ATTENTION, "damaged archive (BadZipFile: Bad CRC-32 for file 'weights.npy')"),
         reproduce="damaged archive (BadZipFile: Bad CRC-32 for file 'weights.npy')"),
    Case("attention_crc_bad_first_frame_last_snapshot", "npz",
         flip_byte(ATTENTION, "weights.npy", lambda n: T_HEADER + 4), "last_snapshot",
         Raises(ATTENTION, "damaged archive (BadZipFile: Bad CRC-32 for file 'weights.npy')"),
         note="a member under zipfile's 4 KB read-ahead is CRC-checked even when only its header is read; "
              "for larger ones reading one frame does not check the CRC (test_safe_read)"),
    Case("weights_rank_3", "npz", npz_with(weights=lambda a: a["weights"][:, 0]), "attention",
         Raises(ATTENTION, "weights has shape (3, 6, 6), expected 4 dimensions (S, H, T, T)"),
         reproduce="weights has shape (3, 6, 6), expected 4 dimensions"),
    Case("weights_dtype_object_pickle", "code", object_weights, "attention",
         Raises(ATTENTION, "weights has dtype object, allowed: float32, float64"), reproduce="weights has dtype object",
         note="unpickling would create outside/pwned"),
    Case("weights_dtype_int", "npz", npz_with(weights=lambda a: a["weights"].astype(np.int64)), "attention",
         Raises(ATTENTION, "weights has dtype int64, allowed: float32, float64")),
    Case("weights_dtype_float16", "npz", npz_with(weights=lambda a: a["weights"].astype(np.float16)), "attention",
         Raises(ATTENTION, "weights has dtype float16, allowed: float32, float64")),
    Case("weights_structured_dtype", "npz",
         npz_with(weights=lambda a: np.zeros((3, 1, 6, 6), dtype=[("a", "<f4")])), "attention",
         Raises(ATTENTION, "weights has dtype [('a', '<f4')], allowed: float32, float64")),
    Case("zip_bomb_declared_4_gb", "bomb", attention_raw(lambda a: (
        deflate([npy_header((250, 1, 2048, 2048)), bytes(1 << 16)]), zipfile.ZIP_DEFLATED, T_HEADER + 250 * 2048 * 2048 * 4, 0, 0)),
         "attention", Raises(ATTENTION, f"member weights.npy declares {T_HEADER + 250 * 2048 * 2048 * 4} bytes uncompressed, "
                                        f"more than the limit of {S.NPZ_LIMIT}"),
         max_decompressed=1024, reproduce="more than the limit"),
    Case("zip_bomb_64_mb_over_a_16_mb_limit", "bomb", attention_raw(zeros_bomb((16, 1, 1024, 1024))), "last_snapshot",
         Raises(ATTENTION, f"member weights.npy declares {T_HEADER + 64 * 1024 * 1024} bytes uncompressed, more than the "
                           "limit of 16777216"), limit=16 * 1024 * 1024, max_decompressed=1024,
         note="a real deflate bomb (64 MB of zeros in ~65 KB), read with a quarter of its size as limit"),
    Case("zip_bomb_48_mb_wrong_dims", "bomb", attention_raw(zeros_bomb((3, 1, 2048, 2048))), "attention",
         Raises(ATTENTION, "tokens has T=6 (axis 0) but weights has T=2048"), max_decompressed=1024,
         note="shape checks come before any data is decompressed"),
    Case("lying_zip_sizes", "bomb", attention_raw(lambda a: (
        deflate([npy_bytes(a["weights"]), bytes(50 << 20)]), zipfile.ZIP_DEFLATED, len(npy_bytes(a["weights"])),
        zlib.crc32(npy_bytes(a["weights"])), 0)), "attention",
         Gives(lambda r: r["weights"].shape, (3, 1, 6, 6)), max_decompressed=8192,
         note="the deflate stream holds 50 MB more than the zip declares: never decompressed"),
    Case("npy_header_lies_about_shape", "npz",
         npz_with(weights=lambda a: npy_header((30, 1, 6, 6)) + a["weights"].tobytes()), "attention",
         Raises(ATTENTION, "member weights.npy: its header declares shape (30, 1, 6, 6) <f4 (4320 bytes) but the member holds 432")),
    Case("tokens_and_weights_disagree_on_T", "npz", npz_with(tokens=lambda a: a["tokens"][:5]), "attention",
         Raises(ATTENTION, "tokens has T=5 (axis 0) but weights has T=6"), reproduce="tokens has T=5"),
    Case("steps_and_weights_disagree_on_S", "npz", npz_with(steps=lambda a: a["steps"][:2]), "attention",
         Raises(ATTENTION, "weights has S=3 (axis 0) but steps has S=2")),
    Case("weights_not_square", "npz", npz_with(weights=lambda a: a["weights"][..., :5]), "attention",
         Raises(ATTENTION, "weights has T=5 (axis 3) but weights has T=6")),
    Case("weights_member_missing", "npz", npz_with(drop=("weights",)), "attention", Raises(ATTENTION, "no member weights.npy"),
         reproduce="no member weights.npy"),
    Case("duplicate_member", "npz", attention_raw(lambda a: stored(npy_bytes(a["weights"])),
                                                  extra=lambda a: [("weights.npy", *stored(npy_bytes(a["weights"])))]),
         "attention", Raises(ATTENTION, "member weights.npy appears twice")),
    Case("encrypted_member", "npz", attention_raw(lambda a: stored(npy_bytes(a["weights"]), flags=1)), "attention",
         Raises(ATTENTION, "member weights.npy is encrypted")),
    Case("bzip2_member", "npz", lambda r, o: _bzip2_weights(r), "attention",
         Raises(ATTENTION, "member weights.npy: compression method 12 (allowed: stored, deflate)")),
    Case("one_hundred_members", "bomb", many_members(100), "attention",
         Raises(ATTENTION, f"100 members, more than the limit of {S.NPZ_MAX_MEMBERS}")),
    Case("fortran_order", "npz", npz_with(weights=lambda a: np.asfortranarray(a["weights"])), "attention",
         Raises(ATTENTION, "member weights.npy is in Fortran order (attnlab writes C order)")),
    Case("npy_header_20_kb", "bomb",
         npz_with(weights=lambda a: npy_custom("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 1, 6, 6), }"
                                               + " " * 20000) + a["weights"].tobytes()), "attention",
         Raises(ATTENTION, f"member weights.npy: .npy header of 20086 bytes, more than {S.NPY_HEADER_LIMIT}")),
    Case("npy_header_with_code", "code",
         npz_with(weights=lambda a: npy_custom("{'descr': __import__('os').system('touch pwned'), "
                                               "'fortran_order': False, 'shape': (3, 1, 6, 6), }")), "attention",
         Raises(ATTENTION, "member weights.npy: bad .npy header (")),
    Case("npy_bad_magic", "npz", npz_with(weights=lambda a: b"PK" + npy_bytes(a["weights"])[2:]), "attention",
         Raises(ATTENTION, "member weights.npy is not a .npy array")),
    Case("npy_version_3", "npz", npz_with(weights=lambda a: npy_custom(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 1, 6, 6), }", a["weights"].tobytes(), version=3)),
         "attention", Raises(ATTENTION, "member weights.npy: .npy format version 3 (allowed: 1, 2)")),
    Case("npy_negative_shape", "npz", npz_with(weights=lambda a: npy_custom(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (-3, 1, 6, -6), }", a["weights"].tobytes())), "attention",
         Raises(ATTENTION, "member weights.npy: negative length in shape (-3, 1, 6, -6)")),
    Case("tokens_100000_chars", "bomb", npz_with(tokens=lambda a: np.array(["x" * 100000])), "attention",
         Raises(ATTENTION, f"tokens has dtype <U100000, allowed: strings of at most {S.TOKEN_CHARS} characters")),
    Case("tokens_outside_unicode", "npz",
         npz_with(tokens=lambda a: np.full(6, 0xFFFFFFFF, dtype="<u4").view("<U1")), "attention",
         Raises(ATTENTION, "tokens holds a character code outside Unicode")),
    Case("tokens_escape_sequences", "text",
         npz_with(tokens=lambda a: np.array(["\x1b]0;pwned\x07", "\x1b[2J", "\u202eabc", "a", "b", "c"])), "attention",
         Gives(lambda r: [S.printable(t) for t in r["tokens"].tolist()],
               ["\\x1b]0;pwned\\x07", "\\x1b[2J", "\\u202eabc", "a", "b", "c"])),
    Case("token_ids_float", "npz", npz_with(token_ids=lambda a: a["token_ids"].astype(np.float64)), "attention",
         Raises(ATTENTION, "token_ids has dtype float64, allowed: int32, int64")),
    Case("no_snapshots", "value", npz_with(steps=lambda a: a["steps"][:0], weights=lambda a: a["weights"][:0]),
         "last_snapshot", Gives(lambda r: r, None)),
    Case("deflated_archive_is_fine", "value", npz_with(compressed=True), "last_snapshot",
         Gives(lambda r: (r[0], r[1].shape), (39, (1, 6, 6)))),
    Case("attention_deleted", "file", lambda r, o: (r / ATTENTION).unlink(), "attention",
         Raises(ATTENTION, "missing", missing=True), reproduce="attention.npz: missing",
         note="a completed training run without its attention.npz"),
    Case("attention_is_a_fifo", "file", fifo(ATTENTION), "last_snapshot",
         Raises(ATTENTION, "is a FIFO (named pipe), not a regular file (refused)"), max_read=0, reproduce="is a FIFO"),
    Case("weights_nan_of_a_diverged_run", "value", npz_with(weights=lambda a: np.full_like(a["weights"], np.nan)),
         "last_snapshot", Gives(lambda r: bool(np.isnan(r[1]).all()), True), note="read as is; the report shows None"),

    # -- 2. walkthrough.npz damaged
    Case("walkthrough_scores_rank_3", "npz", npz_with(WALKTHROUGH, scores=lambda a: a["scores"][..., None]), "walkthrough",
         Raises(WALKTHROUGH, "scores has shape (6, 6, 1), expected 2 dimensions (T, T)"), base="walkthrough",
         reproduce="scores has shape (6, 6, 1)"),
    Case("walkthrough_token_ids_missing", "npz", npz_with(WALKTHROUGH, drop=("token_ids",)), "walkthrough",
         Raises(WALKTHROUGH, "no member token_ids.npy"), base="walkthrough", reproduce="no member token_ids.npy"),
    Case("walkthrough_truncated", "npz", truncate_to(WALKTHROUGH, lambda n: n // 3), "walkthrough",
         Raises(WALKTHROUGH, NOT_ZIP), base="walkthrough", reproduce=NOT_ZIP),
    Case("walkthrough_d_k_disagrees", "npz", npz_with(WALKTHROUGH, K=lambda a: a["K"][:, :3]), "walkthrough",
         Raises(WALKTHROUGH, "K has d_k=3 (axis 1) but Q has d_k=4"), base="walkthrough"),
    Case("walkthrough_crc_bad", "npz", flip_byte(WALKTHROUGH, "Z.npy", lambda n: n - 1), "walkthrough",
         Raises(WALKTHROUGH, "damaged archive (BadZipFile: Bad CRC-32 for file 'Z.npy')"), base="walkthrough",
         reproduce="Bad CRC-32 for file 'Z.npy'"),
]


def _bzip2_weights(run: Path) -> None:
    a = healthy_arrays(run)
    (run / ATTENTION).unlink()
    with zipfile.ZipFile(run / ATTENTION, "w") as zf:
        for k, v in a.items():
            zf.writestr(f"{k}.npy", npy_bytes(v), compress_type=zipfile.ZIP_BZIP2 if k == "weights" else zipfile.ZIP_STORED)


BY_NAME = {c.name: c for c in CASES}
assert len(BY_NAME) == len(CASES), "case names must be unique"


def build_case(case: Case, healthy: dict[str, Path], dest: Path, outside: Path) -> Path:
    """A copy of the healthy run ``case.base`` at ``dest``, damaged as the case says."""
    shutil.copytree(healthy[case.base], dest, symlinks=True)
    case.build(dest, outside)
    return dest


def main(argv: list[str] | None = None) -> int:
    import secrets
    import tempfile

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python tests/hostile_runs.py OUT_DIR", file=sys.stderr)
        return 2
    out = Path(args[0]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    outside = make_outside(out / "_outside", secrets.token_hex(8))
    with tempfile.TemporaryDirectory() as tmp:
        healthy = {"train": make_healthy_run(Path(tmp) / "train"),
                   "walkthrough": make_healthy_run(Path(tmp) / "walkthrough", WALK_OVERRIDES)}
        for case in CASES:
            try:
                build_case(case, healthy, out / case.name, outside)
            except Unsupported as err:
                print(f"{case.name}: skipped ({err})")
                continue
            o = case.outcome
            what = (f"{case.reader} raises: {o.file}: {o.fragment}" if isinstance(o, Raises)
                    else f"{case.reader} gives {S.printable(repr(o.expected), 80)}")
            print(f"{case.name} [{case.kind}]: {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
