"""Every limit on a read from a run dir (docs/security.md lists them in a table), and the
counters of bytes read and decompressed that the tests assert on."""
from __future__ import annotations

CONFIG_LIMIT = 256 * 1024  # bytes of a .hydra/*.yaml file (attnlab's are ~1-4 KB)
SUMMARY_LIMIT = 1024 * 1024  # bytes of summary.json (attnlab's are ~1-15 KB)
METRICS_LIMIT = 64 * 1024 * 1024  # bytes of metrics.csv (~25 bytes a step: ~2.5 million steps)
METRICS_LINE_LIMIT = 1024  # bytes of one metrics.csv line
NPZ_LIMIT = 1024 ** 3  # bytes: the .npz file, and the uncompressed data of the members read from it
NPZ_MAX_MEMBERS = 64  # entries in an .npz archive (attnlab writes 4 or 10)
NPZ_DIRECTORY_LIMIT = 64 * 1024  # bytes of an .npz archive's central directory
NPY_HEADER_LIMIT = 10_000  # bytes of a member's .npy header (numpy's own default)
TOKEN_CHARS = 256  # characters of one token string in attention.npz ``tokens``
YAML_MAX_NODES = 5_000  # YAML nodes after alias expansion (a run's config.yaml has ~60, hydra.yaml ~250)
YAML_MAX_DEPTH = 32  # nesting of YAML/JSON collections (attnlab's configs: 4)
JSON_MAX_DEPTH = 32
REFERENCE_CHAIN = 8  # ${a} -> ${b} -> ... plain references followed at most
TEXT_LIMIT = 200  # characters printable() keeps by default
CHUNK = 1 << 20  # bytes per read/decompress step

# bytes read from run-dir files, and bytes of .npz member data decompressed (or copied)
_counters = {"bytes_read": 0, "bytes_decompressed": 0}


def counters() -> dict[str, int]:
    """Bytes read from run-dir files and bytes of .npz member data decompressed (or copied)
    by :mod:`attnlab.saved.safe_read` since :func:`reset_counters`: the bound on memory and time the
    tests assert."""
    return dict(_counters)


def reset_counters() -> None:
    for k in _counters:
        _counters[k] = 0
