"""The audit link's material in C (``_chain.c``)."""

from collections.abc import Callable

def material_or(
    reference: Callable[
        [str, str, int, int, str, str | None, str | None, str | None, str, str | None], bytes
    ],
    /,
) -> Callable[
    [str, str, int, int, str, str | None, str | None, str | None, str, str | None], bytes
]:
    """``material(...)``: what ``reference`` returns for the same fields, written in C
    (``reference`` called for what C does not write: a str subclass, a number wider
    than 64 bits)."""
