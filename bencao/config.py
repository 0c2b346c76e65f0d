"""One YAML file = one run. Typed dataclasses parse it; ``key=value`` overrides patch it.

Every run config is a dataclass whose fields carry ``metadata={"help": ...}``. ``load_config``
reads the YAML, applies dotted overrides (``index.batch_size=64``, ``kinds=[entities,triples]``),
and builds the dataclass recursively, refusing unknown keys with the file and key named.
"""

from __future__ import annotations

import dataclasses
import math
import stat
import types
import typing
from pathlib import Path
from typing import Any, TypeVar, Union, get_args, get_origin

import yaml

from bencao.errors import BencaoError, ConfigError

T = TypeVar("T")


def field(default: Any = dataclasses.MISSING, *, help: str, default_factory: Any = dataclasses.MISSING) -> Any:
    """A dataclass field with help text (shown by ``bencao config show``-style docs and --help)."""
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata={"help": help})
    return dataclasses.field(default=default, metadata={"help": help})


def resolve_config_path(path: str | Path) -> Path:
    """A YAML path as given when it exists, else the shipped recipe of that name (``graph/sample``,
    ``configs/graph/sample.yaml``: see :mod:`bencao.recipes`); ConfigError when neither exists."""
    p = Path(path).expanduser()
    if p.exists():
        return p
    from bencao.recipes import find, not_found

    hit = find(path)
    if hit is None:
        raise ConfigError(not_found(str(path)))
    return hit


# --------------------------------------------------------------------------- safe YAML

#: Deepest nesting of a YAML document (counting what aliases reference): deeper is refused, not a RecursionError.
YAML_MAX_DEPTH = 100
#: Most nodes a YAML document may expand to through aliases beyond its own nodes ("billion laughs":
#: 600 bytes of nested aliases stand for 10^9 values and exhaust memory when walked).
YAML_MAX_ALIAS_NODES = 100_000
#: Largest YAML file read (recipes, mappings, lexicons and disease trees are far smaller).
YAML_MAX_BYTES = 64 * 1024 * 1024


class YamlRefused(BencaoError):
    """A YAML document that cannot be read: ``problem`` (one line, at most a short quote of the
    input) and the 1-based ``line`` when known. Callers name the file."""

    def __init__(self, problem: str, line: int | None = None):
        self.problem = problem
        self.line = line
        super().__init__(f"line {line}: {problem}" if line else problem)


def short(value: Any, n: int = 60) -> str:
    """``repr`` of a value cut to ``n`` characters: error messages never print a whole (expanded) value."""
    try:
        r = repr(value) if not isinstance(value, (list, dict)) or len(value) < 50 else f"<{type(value).__name__} of {len(value):,} items>"
    except RecursionError:
        r = f"<recursive {type(value).__name__}>"
    r = " ".join(r.split())
    return r if len(r) <= n else r[: n - 1] + "…"


class _BudgetLoader(yaml.SafeLoader):
    """SafeLoader whose composer refuses documents nested deeper than :data:`YAML_MAX_DEPTH`."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = 0

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        """A mapping whose keys are all different: a key given twice (the second silently replacing the first in
        PyYAML) is refused, naming both lines."""
        if isinstance(node, yaml.MappingNode):
            seen: dict[tuple[str, str], int] = {}
            for key_node, _value in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = (self.resolve(yaml.ScalarNode, key_node.value, (True, False)) if key_node.tag is None else key_node.tag,
                       key_node.value)
                line = key_node.start_mark.line + 1
                if key in seen:
                    raise YamlRefused(f"invalid YAML: duplicate key {short(key_node.value)} (lines {seen[key]} and {line}); "
                                      "the second would silently replace the first", line)
                seen[key] = line
        return super().construct_mapping(node, deep=deep)

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > YAML_MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise YamlRefused(f"invalid YAML: nested more than {YAML_MAX_DEPTH} levels deep", mark.line + 1)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _check_expansion(root: Any) -> None:
    """Refuse a node graph whose aliases expand past the budgets (size, depth) or into a cycle.

    Sizes and depths are computed once per distinct node (memoised), so this is linear in the
    document's own size whatever the expansion."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    distinct = 0
    # iterative post-order walk over distinct nodes
    stack: list[tuple[Any, bool]] = [(root, False)]
    on_path: set[int] = set()
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            kids = _children(node)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            depth[key] = 1 + max((depth[id(k)] for k in kids), default=0)
            continue
        if key in size:
            continue
        if key in on_path:
            raise YamlRefused("invalid YAML: an alias refers to a node that contains it (a recursive structure)",
                              node.start_mark.line + 1)
        distinct += 1
        on_path.add(key)
        stack.append((node, True))
        for k in _children(node):
            if id(k) in on_path:
                raise YamlRefused("invalid YAML: an alias refers to a node that contains it (a recursive structure)",
                                  k.start_mark.line + 1)
            if id(k) not in size:
                stack.append((k, False))
    total = size[id(root)]
    if total - distinct > max(YAML_MAX_ALIAS_NODES, distinct):
        raise YamlRefused(f"YAML aliases expand {distinct:,} nodes into {total:,} (an alias bomb?); "
                          f"refused over {max(YAML_MAX_ALIAS_NODES, distinct):,} expanded nodes")
    if depth[id(root)] > YAML_MAX_DEPTH:
        raise YamlRefused(f"invalid YAML: nested more than {YAML_MAX_DEPTH} levels deep through aliases")


def _children(node: Any) -> list[Any]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [x for pair in node.value for x in pair]
    return []


def parse_yaml(text: str) -> Any:
    """YAML text → Python values, safely: only plain types (``SafeLoader``), at most
    :data:`YAML_MAX_DEPTH` levels deep, aliases expanding to at most :data:`YAML_MAX_ALIAS_NODES`
    extra nodes, one document. Raises :class:`YamlRefused` (one line, the line number when known)."""
    loader = None
    try:
        loader = _BudgetLoader(text)  # the reader refuses control characters here
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node)
        return loader.construct_document(node)
    except YamlRefused:
        raise
    except RecursionError:
        raise YamlRefused(f"invalid YAML: nested too deeply") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        line = mark.line + 1 if mark else None
        if isinstance(exc, yaml.reader.ReaderError):  # a control character: say which, and where
            line = text.count("\n", 0, exc.position) + 1
            problem = f"unacceptable character #x{exc.character:04x}: control characters are not allowed"
        raise YamlRefused(f"invalid YAML: {problem[:200]}", line) from None
    finally:
        if loader is not None:
            loader.dispose()


def read_yaml_file(path: Path, error: type[BencaoError] = ConfigError) -> Any:
    """A YAML file read with :func:`parse_yaml`: UTF-8 (a BOM allowed), at most :data:`YAML_MAX_BYTES`;
    every failure one line naming the file (and line)."""
    try:
        st = path.stat()  # follows a symlink: what would be read
        if not stat.S_ISREG(st.st_mode):  # a FIFO would block for ever, /dev/zero never end
            kind = next((k for test, k in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                                          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")) if test(st.st_mode)), "not a file")
            raise error(f"{path}: {kind}{' (through a symlink)' if path.is_symlink() else ''}, not a regular file; give a YAML file")
        size = st.st_size
        if size > YAML_MAX_BYTES:
            raise error(f"{path}: {size:,} bytes, over the {YAML_MAX_BYTES:,}-byte limit of a YAML file")
        with open(path, "rb") as fh:
            raw = fh.read(YAML_MAX_BYTES + 1)  # a file that grows while it is read is still bounded
        if len(raw) > YAML_MAX_BYTES:
            raise error(f"{path}: over the {YAML_MAX_BYTES:,}-byte limit of a YAML file")
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise error(f"{path}:{line}: not UTF-8 (byte 0x{raw[exc.start:exc.start + 1].hex()}); YAML files must be UTF-8") from None
    try:
        return parse_yaml(text)
    except YamlRefused as exc:
        raise error(f"{path}:{exc.line}: {exc.problem}" if exc.line else f"{path}: {exc.problem}") from None


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A YAML mapping (a recipe, a mapping file): a path, or the name of a shipped recipe."""
    path = resolve_config_path(path)
    data = read_yaml_file(path)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def apply_overrides(data: dict[str, Any], overrides: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """Apply ``a.b=value`` overrides; values are parsed as YAML scalars/lists (``true``, ``3``, ``[a,b]``)."""
    for ov in overrides:
        if "=" not in ov:
            raise ConfigError(f"override {ov!r}: expected key=value")
        key, raw = ov.split("=", 1)
        try:
            value = parse_yaml(raw) if raw != "" else ""
        except YamlRefused:
            value = raw
        node = data
        parts = key.strip().split(".")
        for p in parts[:-1]:
            nxt = node.get(p)
            if nxt is None:
                nxt = node[p] = {}
            if not isinstance(nxt, dict):
                raise ConfigError(f"override {ov!r}: {p} is not a section")
            node = nxt
        node[parts[-1]] = value
    return data


def _is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _coerce(value: Any, tp: Any, where: str) -> Any:
    origin = get_origin(tp)
    if tp is Any or tp is object:
        return value
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if value is None:
            return None
        errors = []
        for a in args:
            try:
                return _coerce(value, a, where)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0])
    if origin is typing.Literal:
        if value not in get_args(tp):
            raise ConfigError(f"{where}: {short(value)} is not one of {', '.join(map(repr, get_args(tp)))}")
        return value
    if _is_dataclass_type(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping")
        return from_dict(tp, value, where)
    if origin in (list, tuple):
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list")
        (item_tp, *_rest) = get_args(tp) or (Any,)
        items = [_coerce(v, item_tp, f"{where}[{i}]") for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping")
        kt, vt = get_args(tp) or (Any, Any)
        return {k: _coerce(v, vt, f"{where}.{k}") for k, v in value.items()}
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
            return value.lower() in ("true", "yes", "1")
        raise ConfigError(f"{where}: expected true/false, got {short(value)}")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ConfigError(f"{where}: expected an integer, got {short(value)}")
        try:
            return int(value)
        except ValueError:
            raise ConfigError(f"{where}: expected an integer, got {short(value)}") from None
    if tp is float:
        if isinstance(value, bool):
            raise ConfigError(f"{where}: expected a number, got {short(value)}")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: expected a number, got {short(value)}") from None
        if math.isnan(number) or math.isinf(number):  # nan passes every comparison: a limit of nan limits nothing
            raise ConfigError(f"{where}: expected a finite number, got {short(value)}")
        return number
    if tp is str:
        if isinstance(value, (dict, list)):
            raise ConfigError(f"{where}: expected a string")
        return str(value)
    return value


def from_dict(cls: type[T], data: dict[str, Any], where: str = "config") -> T:
    """Build dataclass ``cls`` from a mapping; unknown keys are an error naming the key.

    A class may list removed keys in ``__removed_keys__`` (key → what to set instead): an old recipe
    that still sets one gets that sentence instead of a silent change of behaviour.
    """
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    removed = getattr(cls, "__removed_keys__", {})
    for key in sorted(set(data) & set(removed)):
        raise ConfigError(f"{where}.{key}: this key was removed: {removed[key]}")
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}")
    kwargs = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in data:
            kwargs[f.name] = _coerce(data[f.name], hints[f.name], f"{where}.{f.name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:  # type: ignore[misc]
            raise ConfigError(f"{where}: missing required key {f.name!r}")
    return cls(**kwargs)


def load_config(cls: type[T], path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> T:
    """Read ``path`` (may be None for all defaults), apply overrides and build ``cls``."""
    path = resolve_config_path(path) if path else None
    data = read_yaml(path) if path else {}
    data = apply_overrides(data, list(overrides))
    return from_dict(cls, data, where=str(path) if path else "config")


def to_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def describe(cls: type, prefix: str = "") -> list[tuple[str, str, str]]:
    """(dotted key, default, help) for every field, recursively: documentation for --help and the configuration reference (docs/)."""
    rows: list[tuple[str, str, str]] = []
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        tp = typing.get_type_hints(cls)[f.name]
        if _is_dataclass_type(tp):
            rows.extend(describe(tp, key + "."))
            continue
        if f.default is not dataclasses.MISSING:
            default = repr(f.default)
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            default = repr(f.default_factory())  # type: ignore[misc]
        else:
            default = "(required)"
        rows.append((key, default, f.metadata.get("help", "")))
    return rows
