"""YAML with line marks: the policy text turned into plain data plus a map from each
value's path to the line it came from, so every later error can name its line.

Duplicate keys are refused here (PyYAML would silently keep the last one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from interlock.errors import PolicyError, PolicyIssue

__all__ = ["Path", "SourceDocument", "parse_yaml"]

Path = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class SourceDocument:
    data: Any
    lines: dict[Path, int]
    file: str | None

    def line_of(self, path: Path) -> int | None:
        """The line of the deepest prefix of ``path`` that the source knows."""
        for end in range(len(path), -1, -1):
            line = self.lines.get(path[:end])
            if line is not None:
                return line
        return None


# libyaml's parser, when PyYAML was built with it, composes the same nodes (with the
# same line marks) several times faster than the pure-Python one. A text it refuses is
# parsed again by the pure-Python parser, whose message is the one users have always
# seen: the error path stays exactly as it was (ADR 0014).
_FAST_LOADER: type[yaml.SafeLoader] | None = getattr(yaml, "CSafeLoader", None)


def parse_yaml(text: str, *, file: str | None = None) -> SourceDocument:
    node = _compose(text, file)
    lines: dict[Path, int] = {}
    if node is None:
        return SourceDocument(data=None, lines=lines, file=file)
    constructor = yaml.SafeLoader("")  # one per document: it caches what it built
    data = _construct(node, (), lines, file, constructor)
    return SourceDocument(data=data, lines=lines, file=file)


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


def _construct(
    node: yaml.Node,
    path: Path,
    lines: dict[Path, int],
    file: str | None,
    constructor: yaml.SafeLoader,
) -> Any:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = _scalar(key_node, constructor)
            if not isinstance(key, (str, int, float, bool)) or isinstance(key, bool):
                raise PolicyError(
                    [
                        PolicyIssue(
                            "mapping keys must be strings",
                            file=file,
                            line=key_node.start_mark.line + 1,
                        )
                    ]
                )
            key = str(key)
            if key in out:
                raise PolicyError(
                    [
                        PolicyIssue(
                            f"duplicate key {key!r}",
                            file=file,
                            line=key_node.start_mark.line + 1,
                            field=".".join(str(p) for p in (*path, key)),
                        )
                    ]
                )
            out[key] = _construct(value_node, (*path, key), lines, file, constructor)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [
            _construct(item, (*path, i), lines, file, constructor)
            for i, item in enumerate(node.value)
        ]
    return _scalar(node, constructor)


_STR_TAG = "tag:yaml.org,2002:str"


def _scalar(node: yaml.Node, constructor: yaml.SafeLoader) -> Any:
    if isinstance(node, yaml.ScalarNode):
        if node.tag == _STR_TAG:  # most of a policy: what construct_yaml_str returns
            return node.value
        return constructor.construct_object(node)
    # A complex key (mapping or list) is never valid in a policy.
    return node
