"""What a call means, read with real parsers — pure, cached, no I/O.

- :func:`shell_facts` — the commands a shell string runs, with their programs, flags,
  and the files and URLs they use (tree-sitter's bash grammar);
- :func:`url_facts` — the host a client really connects to (WHATWG, via ada-url), its
  registrable domain and, for an address, its class;
- :func:`normalise_path` — the file a path names, or the pattern of files it could be.

Example::

    from interlock.facts import shell_facts, url_facts

    [c.program for c in shell_facts("ls /tmp; sudo /bin/rm -Rf /").commands]
    # ['ls', 'sudo', 'rm']
    url_facts("https://evil.example\\\\@docs.example.com/").host   # 'evil.example'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from interlock._lazy import lazy_attributes

if TYPE_CHECKING:
    from interlock.facts.paths import PathError, PathPattern, normalise_path
    from interlock.facts.shell import Command, PathUse, ShellFacts, UrlUse, shell_facts
    from interlock.facts.url import UrlError, UrlFacts, registrable_domain, url_facts

__all__ = [
    "Command",
    "PathError",
    "PathPattern",
    "PathUse",
    "ShellFacts",
    "UrlError",
    "UrlFacts",
    "UrlUse",
    "normalise_path",
    "registrable_domain",
    "shell_facts",
    "url_facts",
]

# Imported on first use (PEP 562): `from interlock.facts.paths import ...` must not
# load the shell walker or the URL parser with it.
_LAZY: dict[str, str] = {
    "Command": "interlock.facts.shell",
    "PathError": "interlock.facts.paths",
    "PathPattern": "interlock.facts.paths",
    "PathUse": "interlock.facts.shell",
    "ShellFacts": "interlock.facts.shell",
    "UrlError": "interlock.facts.url",
    "UrlFacts": "interlock.facts.url",
    "UrlUse": "interlock.facts.shell",
    "normalise_path": "interlock.facts.paths",
    "registrable_domain": "interlock.facts.url",
    "shell_facts": "interlock.facts.shell",
    "url_facts": "interlock.facts.url",
}


__getattr__, __dir__ = lazy_attributes(__name__, globals(), _LAZY)
