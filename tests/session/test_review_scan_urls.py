"""Review of the tails' own split of a plain ``http(s)`` URL (eb99a83):
``_split_plainly`` against ``urlsplit``, and ``_url_parts`` through it against
``_url_parts`` through ``urlsplit`` alone (the behaviour before)."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interlock.session import tails as tails_module


def _old_parts(name: str, url: str) -> tuple[tuple[str, str], ...] | None:
    """_url_parts as it was: every URL through urlsplit (and no cache on either side)."""
    tails_module._PARTS.clear()
    original = tails_module._split_plainly
    tails_module._split_plainly = lambda url: None  # type: ignore[assignment]
    try:
        return tails_module._url_parts(name, url)
    finally:
        tails_module._split_plainly = original  # type: ignore[assignment]
        tails_module._PARTS.clear()


def _new_parts(name: str, url: str) -> tuple[tuple[str, str], ...] | None:
    tails_module._PARTS.clear()
    try:
        return tails_module._url_parts(name, url)
    finally:
        tails_module._PARTS.clear()


def _check(url: str) -> None:
    mine = tails_module._split_plainly(url)
    if mine is not None:
        assert mine == tuple(urlsplit(url)), url
        assert all(type(part) is str for part in mine)
    assert _new_parts("u", url) == _old_parts("u", url), url


_EDGES = [
    "http://",
    "https://",
    "http:///",
    "https:///path",
    "http://host",
    "http://HOST.Example.COM",
    "HtTpS://Mixed.CASE.example:443/P/A/T/H?Q=V#F",
    "http://host:",
    "http://host:80",
    "http://host:notaport/x",
    "http://host:99999999999999999999/x",
    "http://:80/x",
    "http://.../x",
    "http://a..b.c.d/x",
    "http://host/path?#",
    "http://host/path#?",
    "http://host/a#b?c#d",
    "http://host/a?b#c?d",
    "http://host?q=1/2",
    "http://host#frag/with/slash",
    "http://host?",
    "http://host#",
    "http://host/%zz/%41%2F/x?%=%&a=%41#%41",
    "http://host/a\\b\\c?d\\e",
    "http://host\\evil.example/x",
    "http://user@host/x",
    "http://user:pass@host:8080/x",
    "http://user:p%40ss@host/x",
    "http://@host/x",
    "http://host@/x",
    "http://a@b@c/x",
    "http://host%25zone/x",
    "http://host%2Fx/y",
    "http://fe80::1%eth0/x",
    "http://::1/x",
    "http://1.2.3.4:8080/x",
    "http://host;param/x",
    "http://host/x;param?y;z",
    "http://host:80:80/x",
    "https://wJalrXUtnF.EMIK7MDENG.collector.example/c/bPxRfiCY/p.gif?k=EXAMPLEKEY",
    "https://x.example/?a=1&a=2&&b&=c&d=",
    "https://x.example/?" + "&".join(f"k{i}=v{i}" for i in range(200)),
    "https://x.example/" + "/".join(f"s{i}" for i in range(200)),
    "https://" + ".".join(f"l{i}" for i in range(200)) + ".example/x",
    "https://x.example/" + "a" * 3000,
    "https://x.example/?q=" + "b" * 3000 + "#" + "c" * 100,
    "https://x.example/\u00e9",
    "https://x.example/a b",
    "https://x.example/a\tb",
    "https://x.example/a\nb",
    " https://x.example/",
    "https://[::1]/x",
    "https://[::1/x",
    "https://x.example]/",
    "http:\\\\host/x",
    "https:x.example",
    "http:/x.example",
    "httpss://x.example",
    "http+unix://x",
    "https://x.example/~user/!$'()*,;=:@/x",
    "https://x.example/?a=%2B+b&c=d+e",
    "https://x.example/?a=b;c=d",
]


@pytest.mark.parametrize("url", _EDGES)
def test_a_url_at_the_edges_is_split_and_read_as_before(url: str) -> None:
    _check(url)


def test_a_plain_url_is_split_plainly() -> None:
    """The fast path is taken for the usual URLs (else the review above proves little)."""
    for url in _EDGES[:45]:
        if url.isascii() and "[" not in url and "]" not in url:
            assert tails_module._split_plainly(url) is not None, url


_URL = st.builds(
    lambda start, rest: start + rest,
    st.sampled_from(["http://", "https://", "HTTP://", "hTtPs://", "http:/", "https:"]),
    st.text(alphabet="aZ09.-_~:@%/?#&=;+!$'()*,\\|^`{}<>\"Ab", max_size=60),
)
_NETLOC = st.builds(
    lambda host, port, path: f"https://{host}{port}{path}",
    st.from_regex(r"[A-Za-z0-9._-]{0,20}", fullmatch=True),
    st.sampled_from(["", ":", ":0", ":443", ":65536", ":x", "::", ":-1"]),
    st.from_regex(
        r"(/[A-Za-z0-9%._~-]{0,8}){0,4}(\?[a-z0-9=&%+;]{0,20})?(#[a-z0-9?#/]{0,10})?",
        fullmatch=True,
    ),
)


@given(_URL | _NETLOC)
@settings(max_examples=3000, deadline=None)
def test_any_url_is_split_and_read_as_before(url: str) -> None:
    _check(url)
