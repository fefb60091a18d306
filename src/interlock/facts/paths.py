"""Paths as a policy should see them.

A path is judged lexically (the guard never touches the file system: symbolic links
are not resolved). :func:`normalise_path` gives either

- a plain ``str`` — the one path meant: ``/workspace/../etc/passwd`` is
  ``/etc/passwd``, ``//etc//passwd`` is ``/etc/passwd``, ``$HOME/x`` and ``${HOME}/x``
  are ``~/x``; or
- a :class:`PathPattern` — a glob standing for every path it could be, when the text
  does not name one: ``../../etc/passwd`` climbs out of the working directory (it is
  ``*/etc/passwd``), ``$DIR/key.pem`` depends on a variable (``*/key.pem``).

A path with a NUL byte is refused (:class:`PathError`): no file system takes one, and
the part after it is what a C library would see.
"""

from __future__ import annotations

import posixpath
import re
from functools import lru_cache
from typing import Final

from interlock.errors import EvaluationError
from interlock.facts.globs import escape

__all__ = ["PathError", "PathPattern", "normalise_path"]


class PathPattern(str):
    """A path that is not known exactly: a glob over the paths it could be."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"PathPattern({str.__repr__(self)})"


class PathError(EvaluationError):
    """A path that cannot be judged."""


# $HOME, ${HOME} at the start; any other $NAME, ${NAME...} or %NAME% anywhere.
_HOME: Final = re.compile(r"^(?:\$HOME|\$\{HOME\})(?=/|$)")
_VARIABLE: Final = re.compile(
    r"\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*|\$[0-9#?*@!$-]|%[A-Za-z_][A-Za-z0-9_]*%"
)


#: /proc/<pid>/root, cwd, fd/N, exe, map_files (and /dev/fd/N): another name for a file.
_PROC_ALIAS: Final = re.compile(
    r"^/+(?:proc/+(?:self|thread-self|\d+)(?:/+task/+\d+)?/+(root|cwd|fd|exe|map_files)"
    r"|dev/+(fd))(?=/|$)(.*)$"
)


@lru_cache(maxsize=8192)
def normalise_path(text: str) -> str:
    """The path ``text`` names, or a :class:`PathPattern` of what it could name."""
    if "\x00" in text:
        raise PathError("a path with a NUL byte cannot be judged")
    if not text:
        return text
    text = _HOME.sub("~", text)
    proc = _PROC_ALIAS.match(text)
    if proc is not None:
        link, devfd, rest = proc.groups()
        link = link or devfd
        if link == "root":  # /proc/self/root is the root directory
            text = "/" + rest.lstrip("/")
        elif link == "cwd":  # the working directory: a relative path
            return PathPattern("*/" + escape(rest.lstrip("/")) if rest.strip("/") else "*")
        else:  # fd/N, exe, a mount of another process: any file
            return PathPattern("*")
    if _VARIABLE.search(text):
        pieces = _VARIABLE.split(text)
        glob = "*".join(escape(piece) for piece in pieces)
        return PathPattern(_normal_glob(glob))
    return _normal(text)


def _normal(text: str) -> str:
    path = posixpath.normpath(text)
    if path.startswith("//"):  # POSIX leaves a leading // to the system; Linux reads /
        path = "/" + path.lstrip("/")
    if path == ".." or path.startswith("../"):
        rest = "" if path == ".." else path
        while rest.startswith("../"):
            rest = rest[3:]
        if rest == "..":
            rest = ""
        glob = "*/" + escape(rest) if rest else "*"
        return PathPattern(glob)
    return path


def _normal_glob(glob: str) -> str:
    # Collapse the lexical noise a glob can still carry (a//b, /./) without letting
    # `..` next to a wildcard resolve: it could go anywhere.
    glob = re.sub(r"/+", "/", glob)
    glob = glob.replace("/./", "/")
    if "/../" in glob or glob.startswith("../") or glob.endswith("/..") or glob == "..":
        return "*"
    return glob
