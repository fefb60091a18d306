"""YAML with line marks: the policy text turned into plain data plus a map from each
value's path to the line it came from, so every later error can name its line.

Duplicate keys are refused here (PyYAML would silently keep the last one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from interlock.errors import PolicyError, PolicyIssue

__all__ = ["Path", "SourceDocument", "parse_yaml"]

Path = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class SourceDocument:
    data: Any
    file: str | None
    #: the composed YAML nodes the data was built from: their marks are the lines
    root: yaml.Node | None = None
    # Each mapping node's children by key, built when a path first goes through it.
    _children: dict[int, dict[str | None, yaml.Node]] = field(
        default_factory=dict, repr=False, compare=False
    )

    def line_of(self, path: Path) -> int | None:
        """The line of the deepest prefix of ``path`` that the source knows.

        Found by walking the nodes, not kept in a map: a load asks for the lines of
        its rules and of its errors, a small share of a large policy's values, and a
        map of every value's path cost as much as building the data (ADR 0014)."""
        node = self.root
        if node is None:
            return None
        for part in path:
            if type(node) is yaml.MappingNode:
                child = self._child(node, part) if type(part) is str else None
            elif type(node) is yaml.SequenceNode and type(part) is int:
                child = node.value[part] if 0 <= part < len(node.value) else None
            else:
                child = None
            if child is None:
                break
            node = child
        return int(node.start_mark.line) + 1

    def _child(self, node: yaml.MappingNode, key: str) -> yaml.Node | None:
        if len(node.value) <= _SCANNED:
            for key_node, value_node in node.value:
                text = key_node.value if key_node.tag == _STR_TAG else _key_text(key_node)
                if text == key:
                    return value_node  # type: ignore[no-any-return]
            return None
        children = self._children.get(id(node))
        if children is None:
            children = {_key_text(k): v for k, v in node.value}
            self._children[id(node)] = children
        return children.get(key)

    @property
    def lines(self) -> dict[Path, int]:
        """The line of every value, by its path (what :meth:`line_of` walks to)."""
        found: dict[Path, int] = {}
        if self.root is not None:
            _all_lines(self.root, (), found)
        return found


# A mapping of at most this many keys is scanned; a larger one (the top level, asked
# for a line of each rule) is indexed once.
_SCANNED = 8


def _key_text(key_node: yaml.Node) -> str | None:
    """The key as the data holds it (keys were checked when the data was built)."""
    if key_node.tag == _STR_TAG:
        return str(key_node.value)
    key = _scalar(key_node, yaml.SafeLoader(""))
    return str(key) if isinstance(key, (str, int, float)) else None


def _all_lines(node: yaml.Node, path: Path, found: dict[Path, int]) -> None:
    found[path] = node.start_mark.line + 1
    if type(node) is yaml.MappingNode:
        for key_node, value_node in node.value:
            _all_lines(value_node, (*path, str(_key_text(key_node))), found)
    elif type(node) is yaml.SequenceNode:
        for index, item in enumerate(node.value):
            _all_lines(item, (*path, index), found)


# libyaml's parser, when PyYAML was built with it, composes the same nodes (with the
# same line marks) several times faster than the pure-Python one. A text it refuses is
# parsed again by the pure-Python parser, whose message is the one users have always
# seen: the error path stays exactly as it was (ADR 0014).
_FAST_LOADER: type[yaml.SafeLoader] | None = getattr(yaml, "CSafeLoader", None)


def parse_yaml(text: str, *, file: str | None = None) -> SourceDocument:
    node = _compose(text, file)
    if node is None:
        return SourceDocument(data=None, file=file)
    constructor = yaml.SafeLoader("")  # one per document: it caches what it built
    try:
        data = _construct(node, file, constructor)
    except _DuplicateKey as exc:
        raise PolicyError(
            [
                PolicyIssue(
                    f"duplicate key {exc.path[-1]!r}",
                    file=file,
                    line=exc.line,
                    field=".".join(str(p) for p in exc.path),
                )
            ]
        ) from None
    return SourceDocument(data=data, file=file, root=node)


def _compose(text: str, file: str | None) -> yaml.Node | None:
    if _FAST_LOADER is not None:
        try:
            return yaml.compose(text, Loader=_FAST_LOADER)
        except yaml.YAMLError:
            pass  # say why with the pure-Python parser's words, below
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise PolicyError(
            [PolicyIssue(f"not valid YAML: {exc.problem or exc}", file=file, line=line)]
        ) from exc
    except yaml.YAMLError as exc:
        raise PolicyError([PolicyIssue(f"not valid YAML: {exc}", file=file)]) from exc


class _DuplicateKey(Exception):
    """A key given twice; its path is filled in as the error leaves each level (a
    path is only built for the error, not for every value)."""

    def __init__(self, key: str, line: int) -> None:
        self.path: list[str | int] = [key]
        self.line = line


def _construct(node: yaml.Node, file: str | None, constructor: yaml.SafeLoader) -> Any:
    kind = type(node)
    if kind is yaml.ScalarNode:
        return node.value if node.tag == _STR_TAG else constructor.construct_object(node)
    if kind is yaml.MappingNode:
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            # Plain strings, most keys and values, are taken here without a call.
            if type(key_node) is yaml.ScalarNode and key_node.tag == _STR_TAG:
                key = key_node.value
            else:
                key = _key(key_node, file, constructor)
            if key in out:
                raise _DuplicateKey(key, key_node.start_mark.line + 1)
            if type(value_node) is yaml.ScalarNode and value_node.tag == _STR_TAG:
                out[key] = value_node.value
                continue
            try:
                out[key] = _construct(value_node, file, constructor)
            except _DuplicateKey as exc:
                exc.path.insert(0, key)
                raise
        return out
    if kind is yaml.SequenceNode:
        items = []
        for index, item in enumerate(node.value):
            try:
                items.append(_construct(item, file, constructor))
            except _DuplicateKey as exc:
                exc.path.insert(0, index)
                raise
        return items
    return _scalar(node, constructor)


def _key(key_node: yaml.Node, file: str | None, constructor: yaml.SafeLoader) -> str:
    """A key that is not a plain string: a number becomes its text; anything else
    (a boolean, null, a date, a mapping or list) is refused."""
    key = _scalar(key_node, constructor)
    if not isinstance(key, (str, int, float)) or isinstance(key, bool):
        raise PolicyError(
            [
                PolicyIssue(
                    "mapping keys must be strings", file=file, line=key_node.start_mark.line + 1
                )
            ]
        )
    return str(key)


_STR_TAG = "tag:yaml.org,2002:str"


def _scalar(node: yaml.Node, constructor: yaml.SafeLoader) -> Any:
    if isinstance(node, yaml.ScalarNode):
        if node.tag == _STR_TAG:  # most of a policy: what construct_yaml_str returns
            return node.value
        return constructor.construct_object(node)
    # A complex key (mapping or list) is never valid in a policy.
    return node
