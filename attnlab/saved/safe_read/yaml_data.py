"""YAML from a run dir as plain data: a bounded number of nodes *after alias expansion*
(billion laughs), a bounded depth, core tags only, no merge keys, no duplicate or non-string keys.
``${...}`` stays text (see :mod:`attnlab.saved.safe_read.data`).

The events come from libyaml's parser when PyYAML has it (``yaml._yaml.CParser``: a state
machine in C, no recursion, memory bounded by the text's size; :func:`parse_yaml_data` takes 4 ms
instead of 24 ms for a 12.7-KB ``.hydra/hydra.yaml``), else from PyYAML's pure-Python parser;
either way the nodes are composed here in Python (PyYAML's Composer, with this module's node and
depth bounds checked as each node is made, so a deep or huge text is refused early), never by
CParser's own compiled composer, which recurses without those bounds."""
from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

from attnlab.saved.safe_read.files import read_text
from attnlab.saved.safe_read.limits import CONFIG_LIMIT, YAML_MAX_DEPTH, YAML_MAX_NODES
from attnlab.saved.safe_read.text import RunFileError, printable


@functools.cache
def _yaml_loader(c_events: bool = True):
    """The loader class: libyaml's events (``c_events`` and PyYAML has libyaml) or PyYAML's
    pure-Python reader, scanner and parser; PyYAML's Composer bounded here; SafeConstructor's
    scalars; the resolvers without timestamps, with OmegaConf's floats."""
    import yaml
    from yaml.composer import Composer
    from yaml.constructor import SafeConstructor
    from yaml.resolver import Resolver

    try:
        from yaml._yaml import CParser
    except ImportError:  # PyYAML without libyaml
        CParser = None
    if c_events and CParser is not None:
        class Events(CParser, Composer):  # Composer's methods, not CParser's compiled ones (module docstring)
            def __init__(self, stream):
                CParser.__init__(self, stream)
                self.anchors = {}

            get_single_node = Composer.get_single_node
            compose_document = Composer.compose_document
            compose_scalar_node = Composer.compose_scalar_node
            compose_sequence_node = Composer.compose_sequence_node
            compose_mapping_node = Composer.compose_mapping_node
    else:
        class Events(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser, Composer):
            def __init__(self, stream):
                yaml.reader.Reader.__init__(self, stream)
                yaml.scanner.Scanner.__init__(self)
                yaml.parser.Parser.__init__(self)
                Composer.__init__(self)

    class Loader(Events, SafeConstructor, Resolver):
        yaml_implicit_resolvers = {k: [(t, r) for t, r in v if t != "tag:yaml.org,2002:timestamp"]
                                   for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}

        def __init__(self, stream):
            Events.__init__(self, stream)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)
            self.depth = 0
            self.nodes = 0

        def compose_node(self, parent, index):
            self.nodes += 1
            if self.nodes > YAML_MAX_NODES:
                raise _Refused(f"more than {YAML_MAX_NODES} YAML nodes")
            self.depth += 1
            try:
                if self.depth > YAML_MAX_DEPTH:
                    raise _Refused(f"nested deeper than {YAML_MAX_DEPTH} levels")
                return Composer.compose_node(self, parent, index)
            finally:
                self.depth -= 1

    # the float forms OmegaConf reads (1e-3 without a dot), so values come out as Hydra reads them
    Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"""^(?:
         [-+]?[0-9]+(?:_[0-9]+)*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?[0-9]+(?:_[0-9]+)*(?:[eE][-+]?[0-9]+)
        |\.[0-9]+(?:_[0-9]+)*(?:[eE][-+][0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""", re.X), list("-+0123456789."))
    return Loader


class _Refused(Exception):
    pass


LIBYAML_TOO_DEEP = "exceeded maximum nesting depth"  # libyaml >= 0.2.5 refuses more than 1000 levels


MAX_NUMBER_CHARS = 4300  # Python's own limit on the digits of an int it converts to or from text
MAX_INT_BITS = 14_284  # 2**14284 < 10**4300: an int this size prints (str, JSON) within Python's limit
_SURROGATE = re.compile("[\ud800-\udfff]")
_CORE = "tag:yaml.org,2002:"
_SCALAR_TAGS = {_CORE + t for t in ("null", "bool", "int", "float", "str")}


def parse_yaml_data(text: str, label: Any = "<yaml>", *, c_events: bool = True) -> Any:
    """YAML ``text`` as plain data (dict/list/str/int/float/bool/None). Raises RunFileError
    naming ``label``: not YAML, more than one document, more than :data:`YAML_MAX_NODES` nodes
    after alias expansion, deeper than :data:`YAML_MAX_DEPTH`, a recursive alias, a tag other than
    null/bool/int/float/str/seq/map (``!!python/...``, ``!!binary``, ``!custom``), a merge key
    ``<<``, a duplicate key or one that is not a string (``null:``, ``3:``, ``yes:``). Dates stay
    text; ``1e-3`` is a float (as
    OmegaConf reads it). ``${...}`` is kept as text (see :func:`interpolations`). ``c_events``
    False: PyYAML's pure-Python parser even where libyaml is installed (tests compare the two)."""
    import yaml

    try:
        loader = _yaml_loader(c_events)(text)  # PyYAML's Reader checks the characters here
        try:
            node = loader.get_single_node()
        finally:
            loader.dispose()
        if node is None:
            return None
        _check_expansion(node)
        return _construct(node, loader)
    except _Refused as err:
        raise RunFileError(label, f"refused YAML: {err}") from None
    except yaml.YAMLError as err:
        if getattr(err, "problem", None) == LIBYAML_TOO_DEEP:  # libyaml's own bound (1000 > YAML_MAX_DEPTH)
            raise RunFileError(label, f"refused YAML: nested deeper than {YAML_MAX_DEPTH} levels") from None
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        what = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise RunFileError(label, f"not valid YAML ({where}{printable(what, 120)})") from None
    except (ValueError, OverflowError) as err:  # int('9' * 5000): more digits than Python converts
        raise RunFileError(label, f"refused YAML value ({printable(str(err), 120)})") from None


def _check_expansion(root) -> None:
    """Nodes and depth of the tree the node graph expands to (each alias counted as a full
    copy), computed once per distinct node; raises _Refused past the bounds or on a cycle."""
    import yaml

    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    on_stack: set[int] = set()
    stack = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_stack.discard(key)
            children = _children(node)
            size[key] = 1 + sum(size[id(c)] for c in children)
            depth[key] = 1 + max((depth[id(c)] for c in children), default=0)
            if size[key] > YAML_MAX_NODES:
                raise _Refused(f"aliases expand to more than {YAML_MAX_NODES} nodes")
            if depth[key] > YAML_MAX_DEPTH:
                raise _Refused(f"aliases nest deeper than {YAML_MAX_DEPTH} levels")
            continue
        if key in size:
            continue
        if key in on_stack:
            raise _Refused("a recursive alias (a node that contains itself)")
        on_stack.add(key)
        stack.append((node, True))
        if isinstance(node, (yaml.SequenceNode, yaml.MappingNode)):
            for c in _children(node):
                if id(c) in on_stack:
                    raise _Refused("a recursive alias (a node that contains itself)")
                if id(c) not in size:
                    stack.append((c, False))


def _children(node) -> list:
    import yaml

    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [x for pair in node.value for x in pair]
    return []


def _construct(node, loader) -> Any:
    import yaml

    if isinstance(node, yaml.ScalarNode):
        if node.tag not in _SCALAR_TAGS:
            raise _Refused(f"tag {printable(node.tag, 60)} (line {node.start_mark.line + 1}); "
                           "allowed: null, bool, int, float, str, seq, map")
        kind = node.tag[len(_CORE):]
        line = node.start_mark.line + 1
        if kind in ("int", "float") and len(node.value) > MAX_NUMBER_CHARS:  # 1:59:59:... costs quadratic time
            raise _Refused(f"a number of {len(node.value)} characters (line {line}; at most {MAX_NUMBER_CHARS})")
        try:
            value = {"null": loader.construct_yaml_null, "bool": loader.construct_yaml_bool,
                     "int": loader.construct_yaml_int, "float": loader.construct_yaml_float,
                     "str": loader.construct_yaml_str}[kind](node)
        except (LookupError, ValueError, TypeError, ArithmeticError) as err:  # !!bool "maybe", !!int ""
            article = "an" if kind == "int" else "a"
            raise _Refused(f"not {article} {kind}: {printable(repr(node.value), 40)} (line {line}; "
                           f"{type(err).__name__})") from None
        if isinstance(value, str) and _SURROGATE.search(value):  # "\ud800": no file or console can take it
            raise _Refused(f"a lone surrogate in a string (line {line})")
        if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_INT_BITS:
            raise _Refused(f"an integer of {value.bit_length()} bits (line {line}; at most {MAX_INT_BITS}: "
                           f"Python prints at most {MAX_NUMBER_CHARS} digits)")
        return value
    if isinstance(node, yaml.SequenceNode):
        if node.tag != _CORE + "seq":
            raise _Refused(f"tag {printable(node.tag, 60)} (line {node.start_mark.line + 1}); allowed: seq")
        return [_construct(c, loader) for c in node.value]
    if node.tag != _CORE + "map":
        raise _Refused(f"tag {printable(node.tag, 60)} (line {node.start_mark.line + 1}); allowed: map")
    out: dict[Any, Any] = {}
    for k, v in node.value:
        if k.tag == _CORE + "merge":
            raise _Refused(f"merge key '<<' (line {k.start_mark.line + 1})")
        if not isinstance(k, yaml.ScalarNode):
            raise _Refused(f"a mapping key that is not a scalar (line {k.start_mark.line + 1})")
        key = _construct(k, loader)
        if not isinstance(key, str):
            raise _Refused(f"a mapping key that is not a string ({printable(repr(key), 40)}, "
                           f"line {k.start_mark.line + 1})")
        if key in out:
            raise _Refused(f"duplicate key {printable(str(key), 60)} (line {k.start_mark.line + 1})")
        out[key] = _construct(v, loader)
    return out


def read_yaml_data(path: Path, limit: int = CONFIG_LIMIT, *, root: Path | None = None) -> Any:
    """``path`` (checked as :func:`open_run_file`, at most ``limit`` bytes, UTF-8) parsed by
    :func:`parse_yaml_data`. Never resolves ``${...}``. Raises RunFileError."""
    return parse_yaml_data(read_text(path, limit, root=root), Path(path))

