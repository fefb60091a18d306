"""Argument vectors: a shell word's value, and a program's options split from its
operands — the pieces :mod:`interlock.facts.shell` builds commands from.

Also the tables of what wraps, elevates or interprets: ``sudo`` and ``env`` run
another program, ``bash -c`` and ``eval`` run a string, ``python -c`` runs code, and
``PATH=...`` changes what every later command is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from interlock.facts.globs import SEGMENT_STAR, escape
from interlock.facts.programs import Program

__all__ = [
    "COMMAND_STRING_OPTIONS",
    "INTERPRETERS",
    "PRIVILEGE",
    "SHELLS",
    "STDIN_RUNNERS",
    "STEERING_VARIABLES",
    "SYSTEM_DIRS",
    "WRAPPER_VALUES",
    "Options",
    "Parsed",
    "Word",
    "may_be_flag",
    "parse_options",
    "read_options",
]


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


#: Directories whose programs are known by their name: /bin/rm is rm, ./rm is not.
SYSTEM_DIRS: Final = _words(
    "/bin /sbin /usr/bin /usr/sbin /usr/local/bin /usr/local/sbin /opt/homebrew/bin "
    "/opt/local/bin /run/current-system/sw/bin /usr/libexec /snap/bin"
)
SHELLS: Final = _words("sh bash dash zsh ksh mksh ash fish csh tcsh")
#: Wrappers that run their command as someone else: listed as commands themselves.
PRIVILEGE: Final = _words("sudo doas pkexec runuser su sudoedit")
#: Per wrapper: its short options that take a value, and its long ones (for skipping
#: to the command it runs).
WRAPPER_VALUES: Final[dict[str, tuple[str, frozenset[str]]]] = {
    "sudo": (
        "ugCDhprtUT",
        _words(
            "--user --group --close-from --chdir --host --prompt --role --type "
            "--other-user --command-timeout"
        ),
    ),
    "doas": ("uC", frozenset()),
    "pkexec": ("", _words("--user")),
    "runuser": ("ugGwsc", _words("--user --group --supp-group --shell --command")),
    "env": ("uCS", _words("--unset --chdir --split-string")),
    "nice": ("n", _words("--adjustment")),
    "nohup": ("", frozenset()),
    "timeout": ("sk", _words("--signal --kill-after")),
    "stdbuf": ("ioe", _words("--input --output --error")),
    "ionice": ("cnp", _words("--class --classdata --pid")),
    "time": ("fo", _words("--format --output")),
    "command": ("", frozenset()),
    "exec": ("a", frozenset()),
    "builtin": ("", frozenset()),
    "setsid": ("", frozenset()),
    "chrt": ("", frozenset()),
    "taskset": ("", frozenset()),
    "unbuffer": ("", frozenset()),
    "nocache": ("", frozenset()),
    "caffeinate": ("w", frozenset()),
    "xargs": (
        "adEeIiLlnPs",
        _words(
            "--arg-file --delimiter --eof --replace --max-lines --max-args --max-procs "
            "--max-chars --process-slot-var"
        ),
    ),
    "watch": ("nd", _words("--interval --differences")),
    "flock": ("wEc", _words("--timeout --conflict-exit-code --command")),
    "chroot": ("", _words("--userspec --groups")),
    "strace": ("eoOpPsSuXbI", frozenset()),
    "ltrace": ("eoOpPsSuXbI", frozenset()),
    "su": ("cgGsw", _words("--command --group --supp-group --shell --whitelist-environment")),
    "script": ("cEIOTB", _words("--command --echo --log-in --log-out --log-timing --log-io")),
    "unshare": ("SGRw", _words("--setuid --setgid --root --wd --propagation --setgroups")),
    "nsenter": ("tSG", _words("--target --setuid --setgid")),
    "setpriv": ("", _words("--reuid --regid --groups --inh-caps --ambient-caps --bounding-set")),
    "systemd-run": ("upEHMG", _words("--unit --property --setenv --host --machine --uid --gid")),
    "proxychains": ("f", frozenset()),
    "proxychains4": ("f", frozenset()),
    "torsocks": ("upaP", frozenset()),
    "chpst": ("uUbe/nlLmdostcfrp", frozenset()),
    "firejail": ("", frozenset()),
    "coproc": ("", frozenset()),
    "parallel": ("jSaIdEkKnNlL", _words("--jobs --sshlogin --arg-file --colsep --delimiter")),
}
#: Per wrapper: the options whose value is a command string a shell runs.
COMMAND_STRING_OPTIONS: Final[dict[str, frozenset[str]]] = {
    "su": _words("-c --command"),
    "runuser": _words("-c --command"),
    "flock": _words("-c --command"),
    "script": _words("-c --command"),
}
#: Programs that take their commands from their input (`at now`, `batch`): opaque.
STDIN_RUNNERS: Final = _words("at batch")
#: Interpreters, by program name prefix (python3.12 is python), and the options that
#: take inline code.
INTERPRETERS: Final[dict[str, frozenset[str]]] = {
    "python": _words("-c"),
    "pypy": _words("-c"),
    "perl": _words("-e -E"),
    "ruby": _words("-e"),
    "node": _words("-e --eval -p --print"),
    "nodejs": _words("-e --eval -p --print"),
    "deno": _words("eval"),
    "bun": _words("-e --eval"),
    "php": _words("-r"),
    "lua": _words("-e"),
    "Rscript": _words("-e"),
    "osascript": _words("-e"),
    "pwsh": _words("-c -Command -command"),
    "powershell": _words("-c -Command -command"),
    "tclsh": frozenset(),
}
#: Environment variables that change what a command runs (or how its shell reads it).
STEERING_VARIABLES: Final = _words(
    "PATH LD_PRELOAD LD_LIBRARY_PATH LD_AUDIT DYLD_INSERT_LIBRARIES DYLD_LIBRARY_PATH "
    "BASH_ENV ENV IFS SHELLOPTS BASHOPTS PROMPT_COMMAND GIT_SSH GIT_SSH_COMMAND "
    "GIT_EXEC_PATH GIT_EXTERNAL_DIFF GIT_PAGER PAGER EDITOR VISUAL PYTHONSTARTUP "
    "PYTHONPATH PERL5OPT PERL5LIB RUBYOPT NODE_OPTIONS"
)


@dataclass(slots=True)
class Word:
    """A shell word's value: ``text`` when static (quotes and escapes removed), and
    its glob (``pattern``) — literal parts escaped, unknown parts ``*``."""

    text: str
    pattern: str
    static: bool  # no variable, substitution or expansion
    magic: bool  # unquoted *, ?, [ (a glob the shell expands)

    @property
    def exact(self) -> bool:
        return self.static and not self.magic


@dataclass(slots=True)
class Parsed:
    flags: frozenset[str]
    operands: list[Word]
    seen: set[str]  # option spellings as written
    file_options: list[tuple[str, Word]]
    url_options: list[tuple[str, Word]]
    script: Word | None
    dynamic_flags: bool
    #: every option given a value, as spelled, with its value
    values: list[tuple[str, Word]]


@dataclass(slots=True)
class Options:
    """A wrapper's options, read as getopt reads them: where its operands start, the
    value each value-taking option was given, and whether an option was only known
    when the command runs."""

    operands: int
    values: dict[str, Word]
    flags: set[str]
    unknown: bool = False


def read_options(
    args: list[Word], shorts: str, longs: frozenset[str], *, permute: bool = False
) -> Options:
    """getopt on ``args``: ``-abc`` clusters (a value-taking letter takes the rest of
    the cluster, or the next word), ``--long=value`` and ``--long value``, ``--`` ends
    the options. With ``permute`` (GNU's default, which su and runuser keep) options
    after an operand are read too, and ``operands`` is the first operand's index."""
    values: dict[str, Word] = {}
    flags: set[str] = set()
    first_operand: int | None = None
    i = 0
    while i < len(args):
        word = args[i]
        if not word.static:
            return Options(i if first_operand is None else first_operand, values, flags, True)
        text = word.text
        if text == "--":
            if first_operand is None:
                first_operand = i + 1
            break
        if not text.startswith("-") or text == "-":
            if first_operand is None:
                first_operand = i
            if not permute:
                break
            i += 1
            continue
        if text.startswith("--"):
            option, eq, attached = text.partition("=")
            known = next((name for name in longs if name.startswith(option)), None)
            name = option if option in longs else (known or option)
            flags.add(name)
            if eq:
                values[name] = Word(attached, escape(attached), True, False)
                i += 1
            elif name in longs and i + 1 < len(args):
                values[name] = args[i + 1]
                i += 2
            else:
                i += 1
            continue
        letters = text[1:]
        i += 1
        for position, letter in enumerate(letters):
            flags.add("-" + letter)
            if letter in shorts:
                rest = letters[position + 1 :]
                if rest:
                    values["-" + letter] = Word(rest, escape(rest), True, False)
                elif i < len(args):
                    values["-" + letter] = args[i]
                    i += 1
                break
    return Options(len(args) if first_operand is None else first_operand, values, flags)


def may_be_flag(word: Word) -> bool:
    """Whether a word known only when it runs could turn out to be a flag: a variable
    or substitution, or a glob that could expand to a file named ``-rf``."""
    if word.static:
        return word.magic and word.pattern[:1] in ("*", "?", "[", SEGMENT_STAR)
    return word.text[:1] in ("$", "`", "-", "*") or word.pattern[:1] in ("*", SEGMENT_STAR)


def parse_options(spec: Program, args: list[Word], stop_at_operand: bool = False) -> Parsed:
    """Split ``args`` into canonical flags, option values and operands. With
    ``stop_at_operand`` everything from the first operand on is an operand (the
    global options of ``git`` come before its subcommand)."""
    flags: set[str] = set()
    operands: list[Word] = []
    seen: set[str] = set()
    file_options: list[tuple[str, Word]] = []
    url_options: list[tuple[str, Word]] = []
    script: Word | None = None
    dynamic_flags = False
    index = 0
    ended = False

    values: list[tuple[str, Word]] = []

    def value_of(option: str, canonical: str, word: Word) -> None:
        nonlocal script
        values.append((option, word))
        if option in spec.file_options or canonical in spec.file_options:
            file_options.append((option if option in spec.file_options else canonical, word))
        if option in spec.url_options or canonical in spec.url_options:
            url_options.append((option, word))
        if option in spec.script_options or canonical in spec.script_options:
            script = word

    while index < len(args):
        word = args[index]
        index += 1
        if ended:
            operands.append(word)
            continue
        if not word.exact:
            # Only known when it runs: it could be a flag, and it could be a file.
            if may_be_flag(word):
                dynamic_flags = True
            operands.append(word)
            ended = stop_at_operand
            continue
        text = word.text
        if text == "--":
            ended = True
            continue
        if text == "-" or not text.startswith("-"):
            operands.append(word)
            ended = stop_at_operand
            continue
        if spec.single_dash_long or text.startswith("--"):
            option, eq, attached = text.partition("=")
            canonical = spec.canonical(option)
            flags.add(canonical)
            seen.add(option)
            if eq:
                value_of(option, canonical, Word(attached, escape(attached), True, False))
            elif spec.takes_value(canonical, option) and index < len(args):
                value_of(option, canonical, args[index])
                index += 1
            continue
        # A cluster of short options: -rf, -n5, -o file, -i.bak (sed)
        letters = text[1:]
        position = 0
        while position < len(letters):
            letter = letters[position]
            option = "-" + letter
            canonical = spec.canonical(option)
            flags.add(canonical)
            seen.add(option)
            rest = letters[position + 1 :]
            if letter in spec.optional_values:
                break  # the rest of the cluster, if any, is its value
            if letter in spec.short_values:
                if rest:
                    value_of(option, canonical, Word(rest, escape(rest), True, False))
                elif index < len(args):
                    value_of(option, canonical, args[index])
                    index += 1
                break
            position += 1
    return Parsed(
        frozenset(flags), operands, seen, file_options, url_options, script, dynamic_flags, values
    )
