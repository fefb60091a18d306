"""redact() remembers short texts found clean: a text redacts the same the second time
as the first, a text with a secret is never remembered, and a str subclass is never
answered from what it claims to equal."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from interlock.core import redaction
from interlock.core.redaction import Redactor

TEXTS = st.one_of(
    st.sampled_from(
        [
            "plain text",
            "tool",
            "password=hunter2-hunter2",
            "Authorization: Bearer abc.def-123",
            "sk-live-abcdef1234567890abcd",
            "curl -u bob:s3cretpass https://example.com",
            "INTERNAL-1234 leaked",
            "x" * 300,
            "",
        ]
    ),
    st.text(max_size=40),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(TEXTS, min_size=1, max_size=12))
def test_a_remembered_text_redacts_as_a_fresh_redactor_does(texts: list[str]) -> None:
    patterns = [r"INTERNAL-\d{4}"]
    warm = Redactor(extra_patterns=patterns)
    for text in texts + texts:  # every text at least twice: the second from the memo
        assert warm.redact(text) == Redactor(extra_patterns=patterns).redact(text)


def test_a_text_with_a_secret_is_not_remembered() -> None:
    redactor = Redactor()
    secret = "password=hunter2-hunter2"
    assert redactor.redact(secret) != secret
    assert redactor.redact("plain words") == "plain words"
    assert secret not in redactor._clean
    assert "plain words" in redactor._clean


def test_a_long_text_is_not_remembered() -> None:
    redactor = Redactor()
    text = "a" * (redaction._CLEAN_MAX_CHARS + 1)
    assert redactor.redact(text) == text
    assert text not in redactor._clean


def test_the_memo_stays_bounded() -> None:
    redactor = Redactor()
    for n in range(redaction._CLEAN_MAX_ENTRIES + 10):
        redactor.redact(f"text {n}")
    assert len(redactor._clean) <= redaction._CLEAN_MAX_ENTRIES


class _Liar(str):
    """Claims to equal every text, and hashes like a clean one."""

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return hash("plain words")


def test_a_str_subclass_is_redacted_whatever_it_claims_to_equal() -> None:
    redactor = Redactor()
    assert redactor.redact("plain words") == "plain words"
    liar = _Liar("password=hunter2-hunter2")
    assert str.__str__(redactor.redact(liar)) == "password=[REDACTED:password]"
