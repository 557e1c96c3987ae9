"""The one place that reads files from a run dir someone else may have made (issue 11).

A run dir from someone else is **data, never code**: nothing read here is instantiated, no
OmegaConf interpolation or resolver runs on it, nothing from it is printed raw, and every read
is bounded before it starts. Every tool over saved runs (``attnlab-reproduce``,
``attnlab-compare``, the end-of-sweep table, ``attnlab-report``, the comparison figure, and
``attnlab.outputs.artifacts``' readers) reads run dirs only through this package.

Modules, one concern each (everything public is re-exported here, ``from attnlab import
safe_read``): :mod:`~attnlab.saved.safe_read.limits` (every limit, the byte counters),
:mod:`~attnlab.saved.safe_read.text` (:func:`printable`, the errors), :mod:`~attnlab.saved.safe_read.files`
(opening a file), :mod:`~attnlab.saved.safe_read.yaml_data` and :mod:`~attnlab.saved.safe_read.data` (YAML
and JSON as plain data, interpolations, field types), :mod:`~attnlab.saved.safe_read.metrics`
(``metrics.csv``), :mod:`~attnlab.saved.safe_read.npz` (archives), :mod:`~attnlab.saved.safe_read.run_dir`
(one reader per file of a run dir).

What every reader guarantees (limits: :mod:`~attnlab.saved.safe_read.limits`; docs/security.md has the table):

- **Regular files only, no symbolic links at all.** Every path component from the run dir down
  to the file is opened with ``O_NOFOLLOW`` relative to its parent folder's descriptor, so a
  symlink anywhere inside the run dir (``summary.json -> /dev/zero``, ``.hydra -> ~/.ssh``, even
  ``metrics.csv -> other.csv`` pointing inside) is refused, whatever it points to: attnlab never
  writes a symlink, and "inside" cannot be decided safely for a link that a later rename could
  retarget. The run dir itself (the path the user typed) may be a link. The file is opened with
  ``O_NONBLOCK`` and checked with ``fstat`` on the open descriptor: a FIFO, socket, device or
  folder is refused without blocking or reading a byte, and so is a file with more than one hard
  link (a hard link is a second name for a file that may live outside the run dir).
- **Size checked before reading** (``fstat``), and never more than that size read, even if the
  file grows meanwhile (:func:`counters` tallies every byte read and decompressed).
- **YAML** becomes plain data (dict/list/str/int/float/bool/None) from libyaml's events (or
  PyYAML's pure-Python parser) composed in Python with a bounded number of nodes *after alias
  expansion* (billion laughs), a bounded depth, no tags but the YAML core ones, no merge keys, no
  duplicate keys, numbers of at most 4,300 characters, no lone surrogates. ``${...}`` stays text:
  :func:`interpolations` lists it, :func:`resolve_references` resolves only a whole-string plain
  reference to another scalar key (``d_v: ${model.d_model}``, which Hydra saves unresolved in
  every run) and refuses everything else (``${oc.env:..}``, ``${oc.decode:..}``, any resolver,
  text around an interpolation, cycles, chains, references to sections).
- **JSON** with bounded size and depth; :func:`type_problems` checks field types.
- **metrics.csv**: header ``step,loss``; every row checked (increasing int step, float loss),
  lines bounded; errors name the line.
- **npz**: the zip's central directory, every member's compression, declared size and ``.npy``
  header are checked before one byte of data is decompressed: the header's shape x itemsize
  must equal the member's size, the dtype must be in an allow-list (never object, never
  pickle), the rank and the named dims must agree across members, and the total must be within
  the limit. CRC errors and truncation become one-line errors.
- **printable()**: control characters, escape sequences (ESC, CSI, OSC, C1), bidi overrides and
  lone surrogates are shown escaped (``\\x1b``) and long text is cut with a marker.

Every error is a :class:`RunFileError` (a :class:`~attnlab.core.errors.RunDirError`), one line:
``<file>: <what is wrong>``; :class:`MissingRunFile` when the file does not exist.
"""
from __future__ import annotations

from attnlab.saved.safe_read.data import (
                                    HYDRA_SPECIAL,
                                    INTEGER,
                                    NUMBER,
                                    SUMMARY_TYPES,
                                    interpolations,
                                    read_json_data,
                                    resolve_references,
                                    select,
                                    special_keys,
                                    type_problems,
                                    walk,
)
from attnlab.saved.safe_read.files import decode_utf8, open_run_file, read_bytes, read_text
from attnlab.saved.safe_read.limits import (
                                    CHUNK,
                                    CONFIG_LIMIT,
                                    JSON_MAX_DEPTH,
                                    METRICS_LIMIT,
                                    METRICS_LINE_LIMIT,
                                    NPY_HEADER_LIMIT,
                                    NPZ_DIRECTORY_LIMIT,
                                    NPZ_LIMIT,
                                    NPZ_MAX_MEMBERS,
                                    REFERENCE_CHAIN,
                                    SUMMARY_LIMIT,
                                    TEXT_LIMIT,
                                    TOKEN_CHARS,
                                    YAML_MAX_DEPTH,
                                    YAML_MAX_NODES,
                                    counters,
                                    reset_counters,
)
from attnlab.saved.safe_read.metrics import read_metrics
from attnlab.saved.safe_read.npz import Member, MemberInfo, NpzArchive, read_npz
from attnlab.saved.safe_read.run_dir import (
                                    ATTENTION,
                                    ATTENTION_MEMBERS,
                                    CONFIG,
                                    HYDRA,
                                    HYDRA_DIR,
                                    METRICS,
                                    OVERRIDES,
                                    SUMMARY,
                                    WALKTHROUGH,
                                    WALKTHROUGH_MEMBERS,
                                    exists,
                                    file_problem,
                                    open_attention,
                                    read_attention,
                                    read_config,
                                    read_job_num,
                                    read_last_snapshot,
                                    read_overrides,
                                    read_run_metrics,
                                    read_summary,
                                    read_walkthrough,
)
from attnlab.saved.safe_read.text import MissingRunFile, ResolverInterpolation, RunFileError, printable
from attnlab.saved.safe_read.yaml_data import parse_yaml_data, read_yaml_data

__all__ = [
    "ATTENTION", "ATTENTION_MEMBERS", "CHUNK", "CONFIG", "CONFIG_LIMIT", "HYDRA", "HYDRA_DIR", "HYDRA_SPECIAL",
    "INTEGER", "JSON_MAX_DEPTH", "METRICS", "METRICS_LIMIT", "METRICS_LINE_LIMIT", "Member", "MemberInfo",
    "MissingRunFile", "NPY_HEADER_LIMIT", "NPZ_DIRECTORY_LIMIT", "NPZ_LIMIT", "NPZ_MAX_MEMBERS", "NUMBER",
    "NpzArchive", "OVERRIDES", "REFERENCE_CHAIN", "ResolverInterpolation", "RunFileError", "SUMMARY", "SUMMARY_LIMIT",
    "SUMMARY_TYPES",
    "TEXT_LIMIT", "TOKEN_CHARS", "WALKTHROUGH", "WALKTHROUGH_MEMBERS", "YAML_MAX_DEPTH", "YAML_MAX_NODES",
    "counters", "decode_utf8", "exists", "file_problem", "interpolations", "open_attention", "open_run_file",
    "parse_yaml_data", "printable", "read_attention", "read_bytes", "read_config", "read_job_num",
    "read_json_data", "read_last_snapshot", "read_metrics", "read_npz", "read_overrides", "read_run_metrics",
    "read_summary", "read_text", "read_walkthrough", "read_yaml_data", "reset_counters", "resolve_references",
    "select", "special_keys", "type_problems", "walk",
]
