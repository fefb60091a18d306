"""A per-user cache of parsed policy files, so that ``interlock check`` need not import
and run the YAML parser for a file it has read before.

An entry holds what parsing the file gave the compiler — the policy's plain data and
the line of every value the compiler asked about — never a compiled policy: every load
still validates and compiles (a compiled policy holds regexes and CEL programs; they
do not serialise, and compiling is what keeps a change of the compiler's own rules
from being missed). So an entry can only save the parse, and it is used only when it
is certainly the parse of this text:

- **keyed by the text**: the entry's name is the BLAKE2b of the file's text with the
  cache format, the Python and the environment's prefix; the entry holds the whole
  text, compared in full, so no collision can ever serve another file's data;
- **stamped with its parser**: the entry records the size and time of every file of
  Interlock's YAML reader and of the PyYAML package ``import yaml`` would find (located,
  not imported), compared on every use: an upgrade of either is a miss (a system
  libyaml that PyYAML's extension links to is not stamped: it only composes the nodes,
  which PyYAML's own code resolves into values);
- **checked whole**: a header holds the BLAKE2b of the rest of the entry; a truncated,
  corrupt or unreadable entry is ignored and written again;
- **never shared**: the directory is created ``0700`` (and only in a tree of this user's,
  or under a sticky directory such as ``/tmp``), and it and every entry are used only
  when they belong to this user and nobody else can write (or read) them;
  entries are written to a temporary file and renamed into place, so a reader sees a
  whole entry or none;
- **asked only for what it holds**: a line the entry does not hold (the compiler asked
  for a new one) is a miss, and the file is parsed as without a cache;
- **bounded**: each version of a file adds an entry; a write keeps the 64 most recent.

The directory is ``$INTERLOCK_POLICY_CACHE``, else ``$XDG_CACHE_HOME/interlock/policies``,
else ``~/.cache/interlock/policies``; ``INTERLOCK_POLICY_CACHE=off`` turns it off.
Nothing in it is needed: deleting it at any time is safe. See ADR 0014.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from interlock.policy.source import SourceDocument

__all__ = [
    "CACHE_ENV",
    "CacheMiss",
    "CachedLines",
    "PolicyCache",
    "RecordedLines",
    "default_cache",
]

CACHE_ENV: Final = "INTERLOCK_POLICY_CACHE"
_FORMAT: Final = 1
_MAX_BYTES: Final = 32 * 1024 * 1024  # an entry larger than this is neither written nor read
_MAX_NODES: Final = 1_000_000  # values in the data, beyond which it is not cached
_KEPT: Final = 64  # entries kept (the most recently written): each version of a file adds one
_STALE_TEMPORARY_S: Final = 600  # a temporary file this old was left by a writer that died
_PARSER_FILES: Final = ("source.py", "cache.py")


class CacheMiss(Exception):
    """The entry cannot answer (a line it does not hold): parse the file instead."""


class RecordedLines:
    """A parsed document's lines, remembering each one the compiler asks for."""

    def __init__(self, document: SourceDocument) -> None:
        self.document = document
        self.asked: dict[tuple[str | int, ...], int | None] = {}

    @property
    def file(self) -> str | None:
        return self.document.file

    def line_of(self, path: tuple[str | int, ...]) -> int | None:
        line = self.document.line_of(path)
        self.asked[tuple(path)] = line
        return line


class CachedLines:
    """The lines an entry holds; any other is a :class:`CacheMiss`."""

    def __init__(self, file: str | None, lines: Mapping[tuple[str | int, ...], int | None]) -> None:
        self._file = file
        self._lines = lines

    @property
    def file(self) -> str | None:
        return self._file

    def line_of(self, path: tuple[str | int, ...]) -> int | None:
        try:
            return self._lines[tuple(path)]
        except KeyError:
            raise CacheMiss(path) from None


def _digest(data: bytes) -> str:
    """BLAKE2b-256 of ``data``: CPython's own ``_blake2`` (the very ``hashlib.blake2b``)
    when it has one, since ``import hashlib`` loads OpenSSL, which costs a one-call
    ``interlock check`` more than the rest of its cache."""
    try:
        from _blake2 import blake2b
    except ImportError:  # another Python: the same function through hashlib
        from hashlib import blake2b
    return blake2b(data, digest_size=32).hexdigest()


def _plain(data: Any, budget: list[int]) -> bool:
    """Whether ``data`` comes back from JSON as it is: dicts with string keys, lists,
    strings, numbers, booleans and nulls (not a date, bytes or a set), and not too many
    of them."""
    budget[0] -= 1
    if budget[0] < 0:
        return False
    kind = type(data)
    if kind is dict:
        return all(type(k) is str and _plain(v, budget) for k, v in data.items())
    if kind is list:
        return all(_plain(item, budget) for item in data)
    return kind in (str, int, float, bool) or data is None


class PolicyCache:
    """The cache in ``directory`` (created on first write)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = os.fspath(directory)
        self._stamp: str | None = None

    # -- what an entry depends on ------------------------------------------------------

    def _parser_stamp(self) -> str | None:
        """The parser as this process would import it: the size and time of each file
        of Interlock's YAML reader and of the PyYAML package that ``import yaml`` finds
        (found, not imported: a hit must not pay for the import). None if there is no
        such package on the path."""
        if self._stamp is None:
            from importlib.machinery import PathFinder

            spec = PathFinder.find_spec("yaml", sys.path)
            if spec is None or not spec.origin or spec.origin == "built-in":
                return None
            here = Path(__file__).parent
            parts = [_file_stamp(here / name) for name in _PARSER_FILES]
            parts.extend(_directory_stamp(os.path.dirname(spec.origin)))
            self._stamp = "\n".join(parts)
        return self._stamp

    def _key(self, text: str) -> str:
        scope = "\0".join([str(_FORMAT), sys.version, sys.prefix, text])
        return _digest(scope.encode("utf-8", "surrogatepass"))

    # -- the directory ---------------------------------------------------------------

    def _open_directory(self, *, create: bool) -> int | None:
        """A descriptor of the directory, if it is this user's and nobody else's."""
        if create and _may_create(self.directory):
            try:
                os.makedirs(self.directory, mode=0o700, exist_ok=True)
            except OSError:
                return None
        try:
            fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            return None
        info = os.fstat(fd)
        if info.st_uid != os.getuid() or info.st_mode & 0o077:
            os.close(fd)
            return None
        return fd

    # -- reading and writing ---------------------------------------------------------

    def lookup(self, text: str, *, file: str | None) -> tuple[Any, CachedLines] | None:
        """The data and lines of ``text`` if a whole, current entry holds them."""
        if not text:
            return None
        directory = self._open_directory(create=False)
        if directory is None:
            return None
        try:
            raw = _read_private(self._entry_name(text), directory)
        finally:
            os.close(directory)
        if raw is None:
            return None
        try:
            header, _, body = raw.partition(b"\n")
            meta = json.loads(header)
            if meta.get("format") != _FORMAT or meta.get("blake2b") != _digest(body):
                return None
            stamp = self._parser_stamp()
            if stamp is None or meta.get("parser") != stamp:
                return None
            entry = json.loads(body)
            if entry["text"] != text:
                return None
            lines = {tuple(path): line for path, line in entry["lines"]}
            return entry["data"], CachedLines(file, lines)
        except (ValueError, KeyError, TypeError, RecursionError):
            return None

    def store(self, text: str, data: Any, lines: RecordedLines) -> bool:
        """Write the entry of ``text`` (whether it was written: a policy whose data
        JSON would not give back as it is, or a directory that is not private, is not)."""
        try:
            if not text or not _plain(data, [_MAX_NODES]):
                return False
            body = json.dumps(
                {
                    "text": text,
                    "data": data,
                    "lines": [[list(path), line] for path, line in lines.asked.items()],
                },
                ensure_ascii=True,
                separators=(",", ":"),
            ).encode("ascii")
        except (TypeError, ValueError, RecursionError):  # nesting deeper than JSON goes
            return False
        stamp = self._parser_stamp()
        if len(body) > _MAX_BYTES or stamp is None or not _imported_from_path():
            return False
        header = json.dumps({"format": _FORMAT, "blake2b": _digest(body), "parser": stamp}).encode(
            "ascii"
        )
        directory = self._open_directory(create=True)
        if directory is None:
            return False
        try:
            written = _write_private(self._entry_name(text), header + b"\n" + body, directory)
            _prune(directory)
            return written
        finally:
            os.close(directory)

    def _entry_name(self, text: str) -> str:
        return f"{self._key(text)}.json"

    def entries(self) -> Iterator[str]:
        """The names of the entries (for tests and for whoever clears the cache)."""
        try:
            names = os.listdir(self.directory)
        except OSError:
            return
        yield from sorted(n for n in names if n.endswith(".json") and not n.startswith("."))


def _prune(directory: int) -> None:
    """Keep the :data:`_KEPT` newest entries, and no temporary file a dead writer left
    (run after a write, i.e. on a miss: a hit never lists the directory)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    if len(names) <= _KEPT:
        return
    now = time.time()
    entries: list[tuple[float, str]] = []
    for name in names:
        try:
            info = os.stat(name, dir_fd=directory, follow_symlinks=False)
        except OSError:
            continue
        if name.startswith("."):
            if now - info.st_mtime > _STALE_TEMPORARY_S:
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=directory)
        elif name.endswith(".json"):
            entries.append((info.st_mtime, name))
    entries.sort(reverse=True)
    for _, name in entries[_KEPT:]:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=directory)


def _may_create(directory: str) -> bool:
    """Whether creating ``directory`` only adds to a tree this user owns (or to a sticky
    directory such as ``/tmp``): never inside another user's home, as root running with
    that user's ``HOME`` would."""
    path = os.path.abspath(directory)
    while True:
        try:
            info = os.stat(path)
        except FileNotFoundError:
            parent = os.path.dirname(path)
            if parent == path:
                return False
            path = parent
            continue
        except OSError:
            return False
        return info.st_uid == os.getuid() or bool(info.st_mode & stat.S_ISVTX)


def _imported_from_path() -> bool:
    """Whether the ``yaml`` this process parsed with is the one on the path (not one a
    custom importer provided): what :meth:`PolicyCache._parser_stamp` describes."""
    from importlib.machinery import PathFinder

    module = sys.modules.get("yaml")
    spec = PathFinder.find_spec("yaml", sys.path)
    where = getattr(module, "__file__", None)
    return spec is not None and where is not None and spec.origin == where


def _directory_stamp(directory: str) -> list[str]:
    try:
        with os.scandir(directory) as found:
            entries = [(e.name, e.stat()) for e in found if e.is_file()]
    except OSError:
        return [f"{directory}:missing"]
    return [
        f"{directory}/{name}:{info.st_size}:{info.st_mtime_ns}"
        for name, info in sorted(entries, key=lambda entry: entry[0])
    ]


def _file_stamp(path: Path) -> str:
    try:
        info = path.stat()
    except OSError:
        return f"{path}:missing"
    return f"{path}:{info.st_size}:{info.st_mtime_ns}"


def _read_private(name: str, directory: int) -> bytes | None:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=directory)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if (
            not stat.S_ISREG(info.st_mode)
            or info.st_uid != os.getuid()
            or info.st_mode & 0o077
            or info.st_size > _MAX_BYTES
        ):
            return None
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _write_private(name: str, content: bytes, directory: int) -> bool:
    temporary = f".{name}.{os.getpid()}.{os.urandom(6).hex()}"
    try:
        fd = os.open(
            temporary,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
            0o600,
            dir_fd=directory,
        )
    except OSError:
        return False
    try:
        try:
            view = memoryview(content)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=directory)
        return False
    return True


def default_cache(environ: Mapping[str, str] = os.environ) -> PolicyCache | None:
    """The cache ``interlock check`` uses: ``$INTERLOCK_POLICY_CACHE`` (``off``: none),
    else ``$XDG_CACHE_HOME/interlock/policies``, else ``~/.cache/interlock/policies``."""
    configured = environ.get(CACHE_ENV)
    if configured is not None:
        if configured.strip().lower() in ("", "off", "0", "no", "false"):
            return None
        return PolicyCache(configured)
    base = environ.get("XDG_CACHE_HOME")
    if not base or not os.path.isabs(base):
        home = environ.get("HOME") or os.path.expanduser("~")
        if not home or home == "~":
            return None
        base = os.path.join(home, ".cache")
    return PolicyCache(os.path.join(base, "interlock", "policies"))
