"""The server's limits on what a request may hold, and the measure of JSON nesting.
Pure (no web framework): the CLI names these defaults without the server extra."""

from __future__ import annotations

import re
from itertools import accumulate
from typing import Final

__all__ = [
    "DEFAULT_MAX_BODY",
    "DEFAULT_MAX_JSON_DEPTH",
    "MAX_JSON_DEPTH_LIMIT",
    "json_depth",
]

#: The largest request body accepted, in bytes (413 above it).
DEFAULT_MAX_BODY: Final = 1 << 20
#: How deep a request's JSON may nest, counting every array and object (400 deeper).
DEFAULT_MAX_JSON_DEPTH: Final = 100
#: The highest depth limit accepted: Python's JSON parser recurses, and must stay well
#: within its recursion limit (1000 frames) below it.
MAX_JSON_DEPTH_LIMIT: Final = 512

# A JSON string, escapes included; an unterminated one runs to the end of the body.
_STRINGS: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_BRACKETS: Final = b"[]{}"
_NOT_BRACKETS: Final = bytes(b for b in range(256) if b not in _BRACKETS)
# An opener steps one level in (+1), a closer one level out (0xFF is -1 as a signed byte).
_STEPS: Final = bytes.maketrans(_BRACKETS, b"\x01\xff\x01\xff")


def json_depth(raw: bytes) -> int:
    """How deep the arrays and objects of the JSON text ``raw`` nest (0 for a scalar),
    brackets inside strings not counted. Linear in ``len(raw)``, in C but for one
    ``max`` over the running sum, and never recursive; ``raw`` need not be valid JSON
    (the parser judges that later).

    >>> json_depth(b'{"a": [1, "]]]", {"b": []}]}')
    4
    """
    steps = _STRINGS.sub(b"", raw).translate(_STEPS, _NOT_BRACKETS)
    return max(0, max(accumulate(memoryview(steps).cast("b")), default=0))
