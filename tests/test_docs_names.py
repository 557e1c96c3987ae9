"""The code names that docs/security.md and docs/architecture.md give in backticks (``module.name``,
a function, a limit, a class, a file of the package or the suite) and those the conf/ comments give
(``attnlab/core/config.py``, ``attnlab.commands.sweep.job_dirname``, ``ModelConfig``) exist in the code,
so no doc names a function that was merged away or renamed (``experiments/`` is conf/experiment). Read statically (``ast``): nothing is
imported but the libraries a name may come from."""
from __future__ import annotations

import ast
import functools
import importlib
import re

import pytest

from attnlab.core.config import schema_keys

from conftest import ROOT

DOCS = ("docs/security.md", "docs/architecture.md")
LIBRARIES = ("os", "zipfile", "yaml", "json", "numpy", "numpy.lib.format", "signal", "tempfile", "concurrent.futures")
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:[./][A-Za-z_][A-Za-z0-9_]*)+(?:\.py)?")


@functools.lru_cache(maxsize=1)
def code_index() -> tuple[dict[str, dict[str, set[str]]], set[str], set[str]]:
    """({module "core.files": {name: attributes of that name}}, every name defined in attnlab,
    every string constant of attnlab that is an identifier: summary fields, archive members, keys)."""
    modules: dict[str, dict[str, set[str]]] = {}
    names: set[str] = set()
    strings: set[str] = set()
    for path in sorted((ROOT / "attnlab").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top: dict[str, set[str]] = {}
        for node in tree.body:
            for name, inner in _defined(node):
                top.setdefault(name, set()).update(inner)
        dotted = ".".join(path.relative_to(ROOT / "attnlab").with_suffix("").parts)
        modules[dotted.removesuffix(".__init__")] = top
        for node in ast.walk(tree):
            names.update(name for name, _ in _defined(node))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and not re.search(r"\s", node.value):
                strings.update(IDENTIFIER.findall(node.value))  # a key, a field, "a.b.exclude_keys=[": no prose
    return modules, names, strings


def _defined(node: ast.AST) -> list[tuple[str, set[str]]]:
    """The names ``node`` defines at its level, each with its own attributes (a class's methods and fields)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return [(node.name, set())]
    if isinstance(node, ast.ClassDef):
        return [(node.name, {n for child in node.body for n, _ in _defined(child)})]
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [(t.id, set()) for target in targets for t in ast.walk(target) if isinstance(t, ast.Name)]
    if isinstance(node, (ast.Import, ast.ImportFrom)):  # a module's public re-export (``install_signal_handlers``)
        return [((a.asname or a.name).split(".")[0], set()) for a in node.names]
    return []


def library_has(name: str) -> bool:
    return any(hasattr(importlib.import_module(lib), name) for lib in LIBRARIES)


def problem(ref: str) -> str | None:
    """Why ``ref`` (a dotted name, a path or one identifier) names nothing in the code; None when it does,
    or when it is not a code name (a config key, a Hydra key, a run-dir file)."""
    modules, names, strings = code_index()
    if ref.endswith(".py") or "/" in ref and (ROOT / ref).exists():
        found = [base / ref for base in (ROOT, ROOT / "attnlab", ROOT / "tests")]
        return None if any(p.exists() for p in found) else "no such file in the repository"
    key = ref.split("=", 1)[0]
    if key in schema_keys() or any(k.startswith(key + ".") for k in schema_keys()):
        return None  # a config key
    parts = ref.replace("/", ".").removeprefix("attnlab.").split(".")
    if len(parts) == 1:
        name = parts[0]
        if (name in names or name in strings or library_has(name) or any(m.rsplit(".", 1)[-1] == name for m in modules)
                or any(k.rsplit(".", 1)[-1] == name for k in schema_keys())):
            return None
        return "no such name in attnlab"
    for cut in range(len(parts), 0, -1):  # the longest module path: "safe_read", "saved.safe_read", "commands.cli"
        module = ".".join(parts[:cut])
        matches = [m for m in modules if m == module or m.endswith("." + module)]
        if matches:
            rest = parts[cut:]
            if not rest:
                return None
            for m in matches:
                attributes = modules[m].get(rest[0])
                if attributes is not None and (len(rest) == 1 or rest[1] in attributes):
                    return None
            return f"{'.'.join(rest)} is not defined in {' or '.join(matches)}"
    owners = [top[parts[0]] for top in modules.values() if parts[0] in top and parts[0][:1].isupper()]
    if owners:  # a class's attribute: ``RunDirSink.on_end``
        return None if any(parts[1] in attributes for attributes in owners) else f"{parts[0]} has no {parts[1]}"
    return None  # not an attnlab module: a Hydra key, a library's name, a file in a run dir


def is_code_name(span: str) -> bool:
    """A backticked span that names code: a dotted name or path, or one identifier that looks like a
    name in code (ALL_CAPS, CamelCase, snake_case), not a sentence, a command line or a message."""
    if DOTTED.fullmatch(span):
        return not re.search(r"\.(json|csv|yaml|npz|npy|html|png|lock|md|txt)$", span)
    return bool(IDENTIFIER.fullmatch(span)) and ("_" in span.strip("_") or span[:1].isupper())


def doc_references(path: str) -> list[str]:
    return [s for s in re.findall(r"`([^`\n]+)`", (ROOT / path).read_text(encoding="utf-8")) if is_code_name(s)]


def conf_references() -> list[str]:
    """Names in the conf/ files' comments: paths ``x/y.py``, dotted ``attnlab.a.b``, classes ``ModelConfig``."""
    refs = []
    for path in sorted({*(ROOT / "conf").rglob("*.yaml"), *(ROOT / "experiments").glob("*.yaml")}):
        for line in path.read_text(encoding="utf-8").splitlines():
            comment = line.split("#", 1)[1] if "#" in line else ""
            refs += re.findall(r"[\w/]+\.py\b", comment)
            refs += [r.rstrip(".") for r in re.findall(r"\battnlab\.[\w.]+", comment)]
            refs += re.findall(r"\b[A-Z]\w*Config\b", comment)  # a schema class
    return refs


@pytest.mark.parametrize("doc", DOCS)
def test_every_code_name_a_doc_gives_exists(doc):
    refs = doc_references(doc)
    assert len(refs) > 20  # the docs do name code
    missing = {ref: why for ref in dict.fromkeys(refs) if (why := problem(ref))}
    assert not missing, f"{doc} names code that does not exist: {missing}"


def test_every_code_name_the_conf_comments_give_exists():
    refs = conf_references()
    assert "attnlab.commands.sweep.job_dirname" in refs
    missing = {ref: why for ref in dict.fromkeys(refs) if (why := problem(ref))}
    assert not missing, f"conf/ comments name code that does not exist: {missing}"


@pytest.mark.parametrize("ref", ["core/files.read_own_file", "saved/safe_read.output_problem", "runs.job_row",
                                 "table.CSV_TEXT_LIMIT", "attnlab.commands.sweep.job_dirname",
                                 "commands/argv.HYDRA_WRITES_NOTHING", "NpzArchive", "YAML_MAX_NODES",
                                 "core/files.py", "tests/test_safe_read.py", "tokenizer.encoding", "hydra.run.dir",
                                 "CSafeLoader", "RunDirSink.on_end"])
def test_names_that_exist_pass(ref):
    assert problem(ref) is None


@pytest.mark.parametrize("ref", ["safe_read.read_json_data_old", "commands/job.write_status", "attnlab/config.py",
                                 "NO_SUCH_LIMIT", "read_yaml_nowhere", "RunDirSink.no_method", "runs.job_rows"])
def test_names_merged_away_fail(ref):
    assert problem(ref) is not None
