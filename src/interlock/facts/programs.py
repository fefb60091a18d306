"""What Interlock knows about common programs: how they read their options and what
their operands are.

This table turns an argument vector into facts: which words are flags (in one
canonical spelling per meaning: for ``rm``, ``-r``, ``-R``, ``--recursive`` and
``--rec`` are all ``--recursive``), which are option values, and which files the
command reads, writes or deletes. A program that is not here is read generically —
``-abc`` is ``-a -b -c``, ``--name=value`` is ``--name`` — and every operand that
looks like a path is taken as touched (read or written: unknown), so an unknown
program can only ever be judged *more* strictly, never less.

Grow it from what agents run. Wrappers (``sudo``, ``env``, ``xargs``...) and shells
(``bash -c``) are handled in :mod:`interlock.facts.shell`, not here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final, Literal

__all__ = ["GIT_SUBCOMMANDS", "PROGRAMS", "OperandRole", "Program", "generic", "program_spec"]

OperandRole = Literal[
    "read",  # every operand is a file read
    "write",  # every operand is a file written
    "delete",  # every operand is a file deleted
    "none",  # operands are not files
    "pattern-then-read",  # grep: the first operand is a pattern (unless -e/-f), then files
    "script-then-read",  # sed, awk, jq: the first operand is a script (unless -e/-f)
    "copy",  # all read, the last written (or -t DIR written)
    "move",  # all deleted, the last written (or -t DIR written)
    "link",  # the last written
    "mode-then-write",  # chmod, chown: the first operand is a mode or owner
    "dd",  # if=FILE read, of=FILE written
    "urls",  # operands are URLs (curl, wget)
    "touched",  # files of unknown use (tar, zip, scp...)
    "read-then-write",  # uniq IN OUT, xxd IN OUT: the first read, the second written
    "subcommand",  # git, docker, kubectl...: the first operand names what runs
]

FileUse = Literal["read", "write", "delete", "touched"]


@dataclass(frozen=True, slots=True)
class Program:
    """How one program reads its command line."""

    operands: OperandRole = "touched"
    #: short options that take a value (the rest of the cluster, or the next word)
    short_values: str = ""
    #: long options that take a value (``--opt VALUE`` or ``--opt=VALUE``)
    long_values: frozenset[str] = frozenset()
    #: spelling -> canonical flag (``-R`` -> ``--recursive``); long spellings listed
    #: here are also the known long options, matched by unique prefix as getopt does
    aliases: Mapping[str, str] = field(default_factory=dict)
    #: options whose value is a file, and how it is used
    file_options: Mapping[str, FileUse] = field(default_factory=dict)
    #: options whose value replaces the first (pattern or script) operand
    script_options: frozenset[str] = frozenset()
    #: options whose value is a URL
    url_options: frozenset[str] = frozenset()
    #: options (single-dash, long) read whole, not split into letters (find, java)
    single_dash_long: bool = False
    #: short options whose value, optional, can only be attached (``sed -i.bak``)
    optional_values: str = ""
    #: options that run a program of their value (``sort --compress-program``)
    exec_options: frozenset[str] = frozenset()
    #: options whose value names a file read when it starts with ``@`` (``curl -d``)
    at_file_options: frozenset[str] = frozenset()
    #: options whose value is ``name=@file`` or ``name=<file`` (``curl -F``)
    form_options: frozenset[str] = frozenset()
    #: options whose value is a file of URLs fetched (``wget -i``, ``curl -K``)
    url_list_options: frozenset[str] = frozenset()

    def canonical(self, flag: str) -> str:
        """The canonical spelling of ``flag`` for this program."""
        found = self.aliases.get(flag)
        if found is not None:
            return found
        if flag.startswith("--") and len(flag) > 2:  # getopt: any unique prefix, --r too
            matches = {v for k, v in self.aliases.items() if k.startswith(flag)}
            matches |= {k for k in self.long_values if k.startswith(flag)}
            if len(matches) == 1:
                return self.aliases.get(next(iter(matches)), next(iter(matches)))
        return flag

    def takes_value(self, canonical: str, spelled: str) -> bool:
        return (
            spelled in self.long_values
            or canonical in self.long_values
            or (len(spelled) == 2 and spelled[0] == "-" and spelled[1] in self.short_values)
        )


def _p(
    operands: OperandRole,
    *,
    values: str = "",
    long_values: str = "",
    aliases: str = "",
    files: str = "",
    script: str = "",
    urls: str = "",
    single_dash_long: bool = False,
    optional: str = "",
    execs: str = "",
    at_files: str = "",
    forms: str = "",
    url_lists: str = "",
) -> Program:
    """A table entry from compact text: ``aliases="-r -R --recursive=--recursive"``
    (each ``spellings=canonical`` group separated by ``;``), ``files="-o=write"``."""
    alias_map: dict[str, str] = {}
    for group in filter(None, (g.strip() for g in aliases.split(";"))):
        spellings, _, canonical = group.rpartition("=")
        for spelling in spellings.split():
            alias_map[spelling] = canonical
        alias_map[canonical] = canonical
    file_map: dict[str, FileUse] = {}
    for item in files.split():
        option, _, use = item.partition("=")
        file_map[option] = use  # type: ignore[assignment]
    return Program(
        operands=operands,
        short_values=values,
        long_values=frozenset(long_values.split()),
        aliases=MappingProxyType(alias_map),
        file_options=MappingProxyType(file_map),
        script_options=frozenset(script.split()),
        url_options=frozenset(urls.split()),
        single_dash_long=single_dash_long,
        optional_values=optional,
        exec_options=frozenset(execs.split()),
        at_file_options=frozenset(at_files.split()),
        form_options=frozenset(forms.split()),
        url_list_options=frozenset(url_lists.split()),
    )


_RECURSIVE_RM: Final = (
    "-r -R --recursive=--recursive; "
    "-f --force=--force; "
    "-i=--interactive; "
    "-I=--interactive-once; "
    "-d --dir=--dir; "
    "-v --verbose=--verbose; "
    "--one-file-system=--one-file-system; "
    "--no-preserve-root=--no-preserve-root; "
    "--preserve-root=--preserve-root"
)

_READERS: Final = (
    "cat tac nl head tail less more wc sort uniq od xxd hexdump strings file stat "
    "md5sum sha1sum sha224sum sha256sum sha384sum sha512sum b2sum cksum sum base64 base32 "
    "cut paste fold fmt expand unexpand column diff diff3 cmp comm join bat view readlink "
    "realpath ls dir vdir du tree source . zcat bzcat xzcat zless tac iconv look split csplit "
    "shasum md5 pr"
)
_NO_FILES: Final = (
    "echo printf true false pwd date whoami id uname hostname printenv which type sleep seq "
    "yes basename dirname test [ [[ : tr expr bc dc cal uptime nproc arch tty groups logname "
    "users who w locale getconf factor numfmt clear reset ps top free df lsblk env kill "
    "pkill killall pgrep jobs wait umask alias unalias export declare local readonly typeset "
    "set unset shift return exit break continue let hash history help times trap read "
    "getopts cd pushd popd dirs complete compgen shopt enable caller mapfile readarray "
    "disown bg fg suspend logout ulimit"
)

_TABLE: dict[str, Program] = {}
for _name in _READERS.split():
    _TABLE[_name] = _p("read")
_TABLE["uniq"] = _p(
    "read-then-write", values="fsw", long_values="--skip-fields --skip-chars --check-chars"
)
_TABLE["xxd"] = _p("read-then-write", values="cglosC")
for _name in _NO_FILES.split():
    _TABLE[_name] = _p("none")

_TABLE.update(
    {
        "head": _p("read", values="nc", long_values="--lines --bytes"),
        "tail": _p("read", values="ncsF", long_values="--lines --bytes --pid --sleep-interval"),
        "sort": _p(
            "read",
            values="kotST",
            long_values="--key --output --field-separator --buffer-size --temporary-directory "
            "--compress-program --files0-from --random-source",
            files="-o=write --output=write --files0-from=read",
            execs="--compress-program",
            aliases="-o --output=--output",
        ),
        "ls": _p(
            "read",
            values="IwT",
            long_values="--ignore --width --tabsize --format --sort --time --color --block-size",
            aliases="-R --recursive=--recursive; -r --reverse=--reverse; -a --all=--all",
        ),
        "du": _p("read", values="dBt", long_values="--max-depth --block-size --threshold"),
        "tree": _p("read", values="LIPo", files="-o=write"),
        "diff": _p("read", values="CUFIxX", files="-X=read", aliases="-r --recursive=--recursive"),
        "cut": _p("read", values="bcdf", long_values="--bytes --characters --delimiter --fields"),
        "wc": _p("read", long_values="--files0-from", files="--files0-from=read"),
        "kill": _p("none", values="sn"),
        "env": _p("none", values="uCS"),
        "touch": _p("write", values="dtr", long_values="--date --reference", files="-r=read"),
        "mkdir": _p("write", values="m", long_values="--mode"),
        "mkfifo": _p("write", values="m"),
        "mknod": _p("write", values="m"),
        "truncate": _p("write", values="sr", long_values="--size --reference"),
        "tee": _p("write", aliases="-a --append=--append"),
        "rm": _p("delete", aliases=_RECURSIVE_RM),
        "rmdir": _p("delete", aliases="-p --parents=--parents"),
        "unlink": _p("delete"),
        "shred": _p(
            "delete",
            values="ns",
            long_values="--iterations --size --random-source",
            aliases="-u --remove=--remove; -z --zero=--zero; -f --force=--force",
        ),
        "wipe": _p("delete"),
        "srm": _p("delete", aliases="-r -R --recursive=--recursive"),
        "cp": _p(
            "copy",
            values="tS",
            long_values="--target-directory --suffix --backup --sparse --reflink --preserve",
            aliases=(
                "-r -R --recursive=--recursive; "
                "-f --force=--force; "
                "-a --archive=--archive; "
                "-t --target-directory=--target-directory; "
                "-n --no-clobber=--no-clobber"
            ),
            files="-t=write --target-directory=write",
        ),
        "install": _p(
            "copy",
            values="tSmogc",
            long_values="--target-directory --mode --owner --group --suffix",
            files="-t=write --target-directory=write",
        ),
        "rsync": _p(
            "copy",
            values="e",
            long_values="--rsh --exclude --include --exclude-from --include-from --files-from",
            aliases="-r --recursive=--recursive; --delete=--delete; -a --archive=--archive",
            files="--exclude-from=read --include-from=read --files-from=read",
            execs="-e --rsh --rsync-path",
        ),
        "scp": _p(
            "copy",
            values="cFiJlOoPS",
            aliases="-r=--recursive",
            files="-i=read -F=read",
        ),
        "mv": _p(
            "move",
            values="tS",
            long_values="--target-directory --suffix --backup",
            aliases=(
                "-f --force=--force; "
                "-n --no-clobber=--no-clobber; "
                "-t --target-directory=--target-directory"
            ),
            files="-t=write --target-directory=write",
        ),
        "ln": _p(
            "link",
            values="tS",
            long_values="--target-directory --suffix",
            aliases="-s --symbolic=--symbolic; -f --force=--force",
            files="-t=write --target-directory=write",
        ),
        "chmod": _p(
            "mode-then-write",
            long_values="--reference",
            aliases="-R --recursive=--recursive",
        ),
        "chown": _p(
            "mode-then-write",
            long_values="--reference --from",
            aliases="-R --recursive=--recursive",
        ),
        "chgrp": _p(
            "mode-then-write", long_values="--reference", aliases="-R --recursive=--recursive"
        ),
        "chattr": _p("mode-then-write", aliases="-R=--recursive"),
        "setfacl": _p("mode-then-write", values="mMxX", aliases="-R --recursive=--recursive"),
        "dd": _p("dd"),
        "grep": _p(
            "pattern-then-read",
            values="efABCmdD",
            long_values="--regexp --file --after-context --before-context --context "
            "--max-count --directories --devices --include --exclude --exclude-from "
            "--exclude-dir --label --color --colour --binary-files",
            aliases=(
                "-r --recursive=--recursive; "
                "-R --dereference-recursive=--dereference-recursive; "
                "-i --ignore-case=--ignore-case; "
                "-e --regexp=--regexp; "
                "-f --file=--file"
            ),
            files="-f=read --file=read --exclude-from=read",
            script="-e --regexp -f --file",
        ),
        "rg": _p(
            "pattern-then-read",
            values="efgtTmABCMjE",
            long_values="--regexp --file --glob --type --type-not --max-count --replace "
            "--after-context --before-context --context --threads --encoding --pre",
            files="-f=read --file=read",
            script="-e --regexp -f --file",
        ),
        "sed": _p(
            "script-then-read",
            values="efl",
            optional="i",
            long_values="--expression --file --line-length",
            aliases=(
                "-i --in-place=--in-place; "
                "-n --quiet --silent=--quiet; "
                "-E -r --regexp-extended=--regexp-extended; "
                "-e --expression=--expression; "
                "-f --file=--file"
            ),
            files="-f=read --file=read",
            script="-e --expression -f --file",
        ),
        "awk": _p(
            "script-then-read",
            values="fvF",
            long_values="--file --assign --field-separator",
            files="-f=read --file=read",
            script="-f --file",
        ),
        "jq": _p(
            "script-then-read",
            values="f",
            long_values="--from-file --arg --argjson --slurpfile --rawfile --indent",
            files="-f=read --from-file=read",
            script="-f --from-file",
        ),
        "find": _p("read", single_dash_long=True),
        "xargs": _p("none"),
        "tar": _p(
            "touched",
            values="fCTXbgHKLNV",
            long_values="--file --directory --files-from --exclude-from --exclude "
            "--to-command --checkpoint-action --use-compress-program --transform",
            aliases="-x --extract --get=--extract; -c --create=--create; -f --file=--file",
            files="-f=touched --file=touched -C=write --directory=write -T=read "
            "--files-from=read -X=read --exclude-from=read",
            execs="--to-command --checkpoint-action --use-compress-program -I "
            "--info-script --new-volume-script -F --rsh-command",
        ),
        "curl": _p(
            "urls",
            values="oTdFKXHuxAebcEwmyYzrCDQt",
            long_values="--output --upload-file --data --data-binary --data-raw "
            "--data-urlencode --data-ascii --form --form-string --config --request --header "
            "--user --proxy --user-agent --referer --cookie --cookie-jar --cert --key "
            "--cacert --write-out --max-time --connect-timeout --retry --url --output-dir "
            "--dump-header --trace --trace-ascii --stderr --netrc-file --json --resolve "
            "--connect-to --interface --range --time-cond --quote --telnet-option",
            aliases=(
                "-o --output=--output; "
                "-O --remote-name=--remote-name; "
                "-T --upload-file=--upload-file; "
                "-k --insecure=--insecure; "
                "-L --location=--location; "
                "-X --request=--request"
            ),
            files="-o=write --output=write -T=read --upload-file=read -K=read --config=read "
            "-c=write --cookie-jar=write -D=write --dump-header=write --output-dir=write "
            "--trace=write --trace-ascii=write --stderr=write --netrc-file=read",
            urls="--url",
            at_files="-d --data --data-binary --data-urlencode --data-ascii --json -T",
            forms="-F --form",
            url_lists="-K --config",
        ),
        "wget": _p(
            "urls",
            values="OoaiPeUTtwQlADRIXBYL",
            long_values="--output-document --output-file --append-output --input-file "
            "--directory-prefix --execute --user-agent --timeout --tries --wait --quota "
            "--level --accept --reject --include-directories --exclude-directories "
            "--base --post-data --post-file --body-data --body-file --method --header "
            "--user --password --load-cookies --save-cookies --ca-certificate "
            "--certificate --private-key",
            aliases="-O --output-document=--output-document; -r --recursive=--recursive",
            files="-O=write --output-document=write -o=write --output-file=write "
            "-a=write --append-output=write -i=read --input-file=read -P=write "
            "--directory-prefix=write --post-file=read --body-file=read "
            "--load-cookies=read --save-cookies=write",
            url_lists="-i --input-file",
        ),
        "git": _p(
            "subcommand",
            values="Cc",
            long_values="--git-dir --work-tree --namespace --exec-path --config-env",
        ),
        "docker": _p("subcommand", values="cHl", long_values="--config --context --host"),
        "kubectl": _p(
            "subcommand",
            values="nsc",
            long_values="--namespace --context --cluster --kubeconfig --server --user",
        ),
        "npm": _p("subcommand"),
        "pip": _p("subcommand"),
        "systemctl": _p("subcommand"),
        "crontab": _p("read", values="u", aliases="-r=--remove; -e=--edit; -l=--list"),
        "mkfs": _p("write", values="t"),
        "fdisk": _p("write"),
        "parted": _p("write"),
        "wipefs": _p("write", aliases="-a --all=--all"),
        "mount": _p("touched", values="tLUo"),
        "umount": _p("touched"),
        "zip": _p("touched", values="bnt"),
        "unzip": _p("touched", values="dx", files="-d=write"),
        "gzip": _p("touched", values="S"),
        "gunzip": _p("touched", values="S"),
        "bzip2": _p("touched"),
        "xz": _p("touched"),
        "zstd": _p("touched", values="oD", files="-o=write"),
    }
)
for _name in ("egrep", "fgrep", "zgrep"):
    _TABLE[_name] = _TABLE["grep"]
for _name in ("gawk", "mawk", "nawk"):
    _TABLE[_name] = _TABLE["awk"]
for _name in ("yq", "gojq"):
    _TABLE[_name] = _TABLE["jq"]
for _name in ("http", "https", "xh"):
    _TABLE[_name] = _p("urls", files="-o=write --output=write", values="o")

#: The programs Interlock knows, by name.
PROGRAMS: Final[Mapping[str, Program]] = MappingProxyType(_TABLE)

#: The entry for a program the table does not know.
generic: Final = Program()

#: git subcommands with their own flag meanings (``git push -f`` is ``--force``).
GIT_SUBCOMMANDS: Final[Mapping[str, Program]] = MappingProxyType(
    {
        "push": _p(
            "none",
            values="o",
            long_values="--repo --receive-pack --exec --push-option --force-with-lease",
            aliases=(
                "-f --force=--force; "
                "-d --delete=--delete; "
                "--mirror=--mirror; "
                "--force-with-lease=--force-with-lease; "
                "--force-if-includes=--force-if-includes; "
                "--prune=--prune; "
                "--all=--all"
            ),
        ),
        "reset": _p("none", aliases="--hard=--hard; --soft=--soft; --mixed=--mixed"),
        "clean": _p(
            "none",
            values="eo",
            aliases="-f --force=--force; -d=-d; -x=-x; -X=-X; -n --dry-run=--dry-run",
        ),
        "rm": _p("delete", aliases="-r=--recursive; -f --force=--force; --cached=--cached"),
        "checkout": _p("touched", values="bB", aliases="-f --force=--force"),
        "branch": _p("none", aliases="-D=--delete-force; -d --delete=--delete; -f --force=--force"),
    }
)


def program_spec(name: str) -> Program:
    """The table entry for ``name`` (``mkfs.ext4`` is ``mkfs``), or the generic one."""
    found = PROGRAMS.get(name)
    if found is not None:
        return found
    if name.startswith("mkfs."):
        return PROGRAMS["mkfs"]
    return generic
