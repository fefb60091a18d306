"""The fast path of :meth:`interlock.core.redaction.Redactor.redact_value` in C
(``_redaction.c``); returns what ``Redactor._plain`` returns, or ``NotImplemented``
where it raises ``_NotPlain``."""

from collections.abc import Callable

def plain(
    value: object,
    clean: set[str],
    redact: Callable[[str], str],
    is_secret_key: Callable[[str], bool],
    redacted: str,
    max_depth: int,
    max_nodes: int,
    clean_max: int,
    /,
) -> object: ...
