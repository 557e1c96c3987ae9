"""Broken and hostile run dirs, one case per kind of damage, built from a healthy run.

Every case copies a real run made by attnlab's own runner (``run_job``: a small training run, or
the walkthrough) and damages one thing. Each :class:`Case` declares its outcome: the reader of
:mod:`attnlab.saved.safe_read` that refuses it and the message fragment (:class:`Raises`), or the
value that comes out, shown safely (:class:`Gives`); for the files ``attnlab-reproduce`` reads, the
fragment of its one-line error (exit 2).

Used by tests/test_safe_read.py (the reader's line), test_broken_runs.py (each case in a sweep
beside a healthy run, through attnlab-compare and the report) and test_reproduce.py. The kinds:
code in a saved config or archive (``_target_``, YAML tags, pickles), interpolations and
resolvers, files that cost without bound (alias, zip and nesting bombs, huge files, long lines),
links, FIFOs and hard links, damaged artifacts (truncated, CRC-bad, wrong rank, dtype or dims,
bad rows, wrong JSON types), and text that drives a terminal.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import struct
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

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
    import contextlib

    with contextlib.redirect_stdout(io.StringIO()):  # the run's console output is not the corpus's
        status = run_job(cfg, run)
    assert status == "completed", status
    (run / ".hydra").mkdir()
    OmegaConf.save(cfg, run / CONFIG)
    (run / OVERRIDES).write_text(yaml.safe_dump(list(overrides)), encoding="utf-8")
    (run / HYDRA).write_text("hydra:\n  job:\n    name: attnlab\n    num: 0\n", encoding="utf-8")
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


def zip64_attention(comment: bytes = b"") -> Callable[[Path, Path], None]:
    """attention.npz with a zip64 end record and locator before its end record (all sizes true), then a
    zip ``comment``."""
    def build(run: Path, outside: Path) -> None:
        data = (run / ATTENTION).read_bytes()
        at = data.rindex(b"PK\x05\x06")
        count, size, offset = struct.unpack("<2xHLL", data[at + 8:at + 20])
        record = struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, count, count, size, offset)
        locator = struct.pack("<4sLQL", b"PK\x06\x07", 0, at, 1)
        end = data[at:at + 20] + struct.pack("<H", len(comment)) + comment
        (run / ATTENTION).write_bytes(data[:at] + record + locator + end)
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
    # -- code in a saved config: data only, _target_ refused anywhere but optimizer._target_
    Case("target_in_optimizer_betas_item", "code",
         edit(CONFIG, "  betas:\n  - 0.9\n", "  betas:\n  - _target_: builtins.open\n    _args_:\n    - {outside}/victim.txt\n"
              "    - w\n"), "config",
         Gives(keys_of_special, ["optimizer._target_", "optimizer.betas[0]._target_", "optimizer.betas[0]._args_"]),
         reproduce=f"optimizer.betas[0]._target_='builtins.open': {REPRO_TARGET}"),

    # -- secrets: no interpolation is resolved; only plain references are copied
    Case("oc_env_secret_in_sentence", "secret",
         edit(CONFIG, "sentence: Your journey starts with one step", "sentence: ${oc.env:ATTNLAB_CANARY_SECRET}"),
         "config", Raises(CONFIG, f"sentence holds an interpolation (${{oc.env:{SECRET_ENV}}}); {RESOLVER}"),
         reproduce=f"sentence holds an interpolation (${{oc.env:{SECRET_ENV}}}); {RESOLVER}"),
    # OmegaConf's escape: text, as Hydra saves `attnlab 'sentence=costs ${price} today'`; nothing is resolved
    Case("escaped_interpolation_is_text", "secret",
         edit(CONFIG, "sentence: Your journey starts with one step", "sentence: \\${oc.env:HOME}"), "config",
         Gives(lambda d: d["sentence"], "${oc.env:HOME}")),
    Case("text_around_a_reference", "secret",
         edit(CONFIG, "sentence: Your journey starts with one step", "sentence: 'x ${model.d_model}'"), "config",
         Raises(CONFIG, f"sentence holds an interpolation (x ${{model.d_model}}); {WHOLE}"), reproduce=WHOLE),
    Case("reference_cycle", "secret",
         both(edit(CONFIG, "  d_k: 4", "  d_k: ${model.d_v}"), edit(CONFIG, "  d_v: ${model.d_model}", "  d_v: ${model.d_k}")),
         "config", Raises(CONFIG, "model.d_k: the references model.d_k -> model.d_v -> model.d_k form a cycle"),
         reproduce="form a cycle"),
    Case("plain_reference_is_copied", "secret", lambda run, outside: None, "config",
         Gives(lambda d: (d["model"]["d_v"], S.interpolations(d)), (6, [])),
         note="Hydra saves d_v: ${model.d_model} in every run"),

    # -- YAML that costs without bound, and YAML that is not plain data
    Case("billion_laughs", "bomb", put(CONFIG, billion_laughs()), "config",
         Raises(CONFIG, f"refused YAML: more than {S.YAML_MAX_NODES} YAML nodes (aliases expanded)"),
         reproduce="YAML nodes (aliases expanded)", note="~1 KB; 9**9 strings if expanded"),
    Case("billion_laughs_in_hydra_yaml", "bomb", put(HYDRA, billion_laughs()), "job_num",
         Raises(HYDRA, f"refused YAML: more than {S.YAML_MAX_NODES} YAML nodes (aliases expanded)")),
    Case("deep_nesting", "bomb", put(CONFIG, "a: " + "[" * 10000 + "]" * 10000 + "\n"), "config",
         Raises(CONFIG, f"refused YAML: nested deeper than {S.YAML_MAX_DEPTH} levels"), reproduce="nested deeper"),
    Case("config_50_mb", "bomb", sparse(CONFIG, 50 * 1024 * 1024), "config",
         Raises(CONFIG, f"is 52428800 bytes, more than the limit of {S.CONFIG_LIMIT} bytes"), max_read=0,
         reproduce=f"is 52428800 bytes, more than the limit of {S.CONFIG_LIMIT} bytes"),
    Case("python_tag", "code", edit(CONFIG, "seed: 42", "seed: !!python/object/apply:os.system ['touch {outside}/pwned']"),
         "config", Raises(CONFIG, "refused YAML: tag tag:yaml.org,2002:python/object/apply:os.system (line 3)"),
         reproduce="refused YAML: tag tag:yaml.org,2002:python/object/apply:os.system"),
    Case("merge_key", "code", edit(CONFIG, "model:\n  d_model: 6\n", "model:\n  <<: {d_model: 6}\n"), "config",
         Raises(CONFIG, "refused YAML: merge key '<<' (line 13)"), reproduce="merge key"),
    Case("duplicate_key", "code", edit(CONFIG, "seed: 42\n", "seed: 42\nseed: 7\n"), "config",
         Raises(CONFIG, "refused YAML: duplicate key seed (line 4)"), reproduce="duplicate key seed"),
    Case("config_not_utf8", "damaged", put(CONFIG, b"task: train\nsentence: \xff\xfe\n"), "config",
         Raises(CONFIG, "not UTF-8 text (byte 22: invalid start byte)"), reproduce="not UTF-8 text"),
    Case("config_syntax_error", "damaged", put(CONFIG, "model: [unclosed\n"), "config",
         Raises(CONFIG, "expected ',' or ']'"), reproduce="not valid YAML"),  # libyaml: "did not find ..."
    Case("config_is_a_list", "damaged", put(CONFIG, "- a\n- b\n"), "config",
         Raises(CONFIG, "not a config (a YAML mapping is expected, found a list)"), reproduce="not a config"),
    Case("config_huge_int", "bomb", edit(CONFIG, "seed: 42", "seed: " + "9" * 5000), "config",
         Raises(CONFIG, "refused YAML: a number of 5000 characters (at most 4300)"), reproduce="a number of 5000 characters"),
    Case("null_key", "damaged", prepend(CONFIG, "null: x\n"), "config",
         Raises(CONFIG, "refused YAML: a mapping key that is not a string (None)"), reproduce="not a string"),
    Case("date_stays_text", "value", edit(CONFIG, "  compare_sentence: null", "  compare_sentence: 2024-01-01"), "config",
         Gives(lambda d: d["analysis"]["compare_sentence"], "2024-01-01")),
    Case("float_without_dot", "value", edit(CONFIG, "  loss_threshold: 0.001", "  loss_threshold: 1e-3"), "config",
         Gives(lambda d: d["train"]["loss_threshold"], 0.001)),
    Case("overrides_with_escapes", "text", put(OVERRIDES, '- "sentence=\\e]0;pwned\\a\\e[2J"\n'), "overrides",
         Gives(lambda o: [S.printable(x) for x in o], ["sentence=\\x1b]0;pwned\\x07\\x1b[2J"])),

    # -- not a regular file, or a link out of the run dir
    Case("summary_symlink_to_dev_zero", "file", symlink(SUMMARY, lambda r, o: "/dev/zero"), "summary",
         Raises(SUMMARY, LINK), max_read=0, reproduce=LINK),
    Case("summary_fifo", "file", fifo(SUMMARY), "summary",
         Raises(SUMMARY, "is a FIFO (named pipe), not a regular file (refused)"), max_read=0, reproduce="is a FIFO"),
    Case("summary_missing", "file", lambda r, o: (r / SUMMARY).unlink(), "summary",
         Raises(SUMMARY, "missing", missing=True), max_read=0, reproduce="summary.json: missing (the run never started)"),
    Case("hydra_folder_symlink_outside", "file",
         both(lambda r, o: shutil.copytree(r / ".hydra", o / "hydra_copy", dirs_exist_ok=True),
              symlink(".hydra", lambda r, o: o / "hydra_copy")), "config",
         Raises(CONFIG, "its folder .hydra is a symbolic link (refused: a run dir holds no links)"), max_read=0,
         reproduce="its folder .hydra is a symbolic link"),
    Case("metrics_hard_link_to_outside", "file", hardlink_outside(METRICS), "metrics",
         Raises(METRICS, "has 2 hard links (refused: it may be a file outside the run dir)"), max_read=0,
         reproduce="has 2 hard links"),

    # -- summary.json of the wrong shape or types
    Case("summary_is_a_list", "summary", put(SUMMARY, "[1, 2]"), "summary", Raises(SUMMARY, "is a list, expected an object"),
         reproduce="summary.json: is a list, expected an object"),
    Case("final_loss_is_a_str", "summary", summary_with(final_loss="0.07"), "summary",
         Raises(SUMMARY, "final_loss is a str, expected a number or null"), reproduce="final_loss is a str, expected a number"),
    Case("summary_truncated", "summary", truncate_to(SUMMARY, lambda n: n // 2), "summary",
         Raises(SUMMARY, "not valid JSON (line "), reproduce="not valid JSON"),
    Case("summary_nested_100000_deep", "bomb", put(SUMMARY, "[" * 100000 + "]" * 100000), "summary",
         Raises(SUMMARY, f"nested deeper than {S.JSON_MAX_DEPTH} levels")),
    Case("final_loss_nan_is_a_number", "value", summary_with(final_loss=float("nan"), status="diverged"), "summary",
         Gives(lambda s: repr(s["final_loss"]), "nan"), note="a diverged run's loss"),

    # -- text that drives a terminal: read fine, printed escaped
    Case("summary_error_escape_sequences", "text", summary_with(error=ESCAPES), "summary",
         Gives(printed("error"), ESCAPES_SHOWN)),
    Case("status_escape_sequences", "text", summary_with(status="\x1b[2Jrunning"), "summary",
         Gives(printed("status"), "\\x1b[2Jrunning"), reproduce="has unknown status '\\x1b[2Jrunning'"),
    Case("lone_surrogate", "text", put(SUMMARY, '{"status": "completed", "error": "x\\ud800y"}'), "summary",
         Gives(lambda s: S.printable(s["error"]).encode("utf-8"), b"x\\ud800y"), note="printing it raw raises UnicodeEncodeError"),

    # -- metrics.csv damaged
    Case("metrics_garbage_loss", "metrics", metrics_lines(lambda ls: _set(ls, 6, "5,banana")), "metrics",
         Raises(METRICS, "line 7: loss 'banana' is not a number")),
    Case("metrics_header_only", "value", put(METRICS, "step,loss\n"), "metrics", Gives(lambda r: (r[0].size, r[1].size), (0, 0))),
    Case("metrics_huge_single_line", "bomb", metrics_lines(lambda ls: _set(ls, 2, "1," + "9" * 1_000_000)), "metrics",
         Raises(METRICS, f"line 3: longer than {S.METRICS_LINE_LIMIT} bytes")),
    Case("metrics_steps_go_back", "metrics", metrics_lines(lambda ls: _set(_set(ls, 5, ls[6]), 6, ls[5])), "metrics",
         Raises(METRICS, "line 7: step 4 after step 5 (steps must increase)")),

    # -- attention.npz damaged
    Case("attention_truncated", "npz", truncate_to(ATTENTION, lambda n: n // 2), "attention", Raises(ATTENTION, NOT_ZIP),
         reproduce=NOT_ZIP),
    Case("attention_crc_bad", "npz", flip_byte(ATTENTION, "weights.npy", lambda n: n - 1), "attention",
         Raises(ATTENTION, "damaged archive (BadZipFile: Bad CRC-32 for file 'weights.npy')"),
         reproduce="damaged archive (BadZipFile: Bad CRC-32 for file 'weights.npy')"),
    Case("weights_rank_3", "npz", npz_with(weights=lambda a: a["weights"][:, 0]), "attention",
         Raises(ATTENTION, "weights has shape (3, 6, 6), expected 4 dimensions (S, H, T, T)"),
         reproduce="weights has shape (3, 6, 6), expected 4 dimensions"),
    Case("weights_dtype_object_pickle", "code", object_weights, "attention",
         Raises(ATTENTION, "weights has dtype object, allowed: float32, float64"), reproduce="weights has dtype object",
         note="unpickling would create outside/pwned"),
    Case("weights_dtype_float16", "npz", npz_with(weights=lambda a: a["weights"].astype(np.float16)), "attention",
         Raises(ATTENTION, "weights has dtype float16, allowed: float32, float64")),
    Case("zip_bomb_declared_4_gb", "bomb", attention_raw(lambda a: (
        deflate([npy_header((250, 1, 2048, 2048)), bytes(1 << 16)]), zipfile.ZIP_DEFLATED, T_HEADER + 250 * 2048 * 2048 * 4, 0, 0)),
         "attention", Raises(ATTENTION, f"bytes uncompressed, more than the limit of {S.NPZ_LIMIT}"),
         max_decompressed=1024, reproduce="more than the limit"),
    Case("npy_header_lies_about_shape", "npz",
         npz_with(weights=lambda a: npy_header((30, 1, 6, 6)) + a["weights"].tobytes()), "attention",
         Raises(ATTENTION, "member weights.npy: its header declares shape (30, 1, 6, 6) <f4 (4320 bytes) but the member holds 432")),
    Case("steps_and_weights_disagree_on_S", "npz", npz_with(steps=lambda a: a["steps"][:2]), "attention",
         Raises(ATTENTION, "weights has S=3 (axis 0) but steps has S=2")),
    Case("bzip2_member", "npz", lambda r, o: _bzip2_weights(r), "attention",
         Raises(ATTENTION, "member weights.npy: compression method 12 (allowed: stored, deflate)")),
    Case("one_hundred_members", "bomb", many_members(100), "attention",
         Raises(ATTENTION, f"100 members, more than the limit of {S.NPZ_MAX_MEMBERS}")),
    Case("directory_of_2000_members", "bomb", many_members(2000), "attention",
         Raises(ATTENTION, f"bytes, more than the limit of {S.NPZ_DIRECTORY_LIMIT}"), max_read=64),
    Case("zip64_end_record", "bomb", zip64_attention(), "attention",
         Raises(ATTENTION, "a zip64 end record (refused: an .npz attnlab writes has none)"), max_read=64,
         note="zipfile takes the directory's size from it, not from the end record"),
    Case("zip64_end_record_before_a_comment", "bomb", zip64_attention(b"ten bytes!"), "attention",
         Raises(ATTENTION, "a zip64 end record (refused: an .npz attnlab writes has none)")),
    Case("encrypted_member", "npz", attention_raw(lambda a: stored(npy_bytes(a["weights"]), flags=1)), "attention",
         Raises(ATTENTION, "damaged archive (RuntimeError: File 'weights.npy' is encrypted")),
    Case("npy_header_with_code", "code",
         npz_with(weights=lambda a: npy_custom("{'descr': __import__('os').system('touch pwned'), "
                                               "'fortran_order': False, 'shape': (3, 1, 6, 6), }")), "attention",
         Raises(ATTENTION, "member weights.npy: bad .npy header (")),
    Case("tokens_100000_chars", "bomb", npz_with(tokens=lambda a: np.array(["x" * 100000])), "attention",
         Raises(ATTENTION, f"tokens has dtype <U100000, allowed: strings of at most {S.TOKEN_CHARS} characters")),
    Case("no_snapshots", "value", npz_with(steps=lambda a: a["steps"][:0], weights=lambda a: a["weights"][:0]),
         "last_snapshot", Gives(lambda r: r, None)),
    Case("deflated_archive_is_fine", "value", npz_with(compressed=True), "last_snapshot",
         Gives(lambda r: (r[0], r[1].shape), (39, (1, 6, 6)))),
    Case("attention_deleted", "file", lambda r, o: (r / ATTENTION).unlink(), "attention",
         Raises(ATTENTION, "missing", missing=True), reproduce="attention.npz: missing",
         note="a completed training run without its attention.npz"),

    # -- walkthrough.npz damaged
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
