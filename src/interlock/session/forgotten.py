"""Sessions the in-memory history forgot before they expired.

:class:`~interlock.session.history.MemoryHistory` keeps what a demoted session must
not lose (its labels, its step numbering, its whole-session counts) for up to
``max_sessions × 100`` sessions. Past that the least recently written is forgotten
whole — and a forgotten session must not come back clean: its ``secret`` label gone,
its per-session caps counting from zero. So the key of every session forgotten so
is added to :class:`ForgottenSessions`, a Bloom filter: it never says "not
forgotten" of a session it was given, and says "forgotten" of a session it was not
given with a small probability (the false-positive rate below). The history then
refuses to read such a session (``SessionUnavailable``: its checks are undetermined,
never allowed) for as long as the process runs.

Sized at 2**24 bits (2 MiB, made on the first session forgotten) and 7 hashes: the
chance that a session never forgotten is taken for one is ≈ 2e-8 after 100,000
sessions forgotten, ≈ 5e-4 after 1,000,000 — a process that forgets that many should
keep its sessions in the SQL store.

Example::

    >>> forgotten = ForgottenSessions()
    >>> forgotten.add(("acme", "s-1"))
    >>> ("acme", "s-1") in forgotten, ("acme", "s-2") in forgotten
    (True, False)
"""

from __future__ import annotations

from typing import Final

#: Bits in the filter (a power of two) and bit positions set per session.
BITS: Final = 1 << 24
HASHES: Final = 7

_MASK: Final = BITS - 1
_WORD: Final = (1 << 64) - 1


class ForgottenSessions:
    """Keys ``(tenant, session_id)`` of sessions forgotten before they expired: a Bloom
    filter (no false "not forgotten"). Not thread-safe: the history holds its lock."""

    __slots__ = ("_bits", "count")

    def __init__(self) -> None:
        self._bits = bytearray(BITS // 8)
        #: sessions added (the false-positive rate grows with it)
        self.count = 0

    def add(self, key: tuple[str, str]) -> None:
        bits = self._bits
        for at in _positions(key):
            bits[at >> 3] |= 1 << (at & 7)
        self.count += 1

    def __contains__(self, key: object) -> bool:
        if type(key) is not tuple:
            return False
        bits = self._bits
        return all(bits[at >> 3] & (1 << (at & 7)) for at in _positions(key))


def _positions(key: tuple[str, ...]) -> list[int]:
    """The filter's bit positions for ``key``: double hashing of two of Python's
    keyed string hashes (an attacker who cannot read the process's hash key cannot
    aim a session at another's bits; if they could, they would only cause refusals)."""
    first = hash(key) & _WORD
    second = (hash((key, "interlock-forgotten")) & _WORD) | 1
    return [(first + i * second) & _MASK for i in range(HASHES)]
