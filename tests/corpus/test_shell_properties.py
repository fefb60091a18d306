"""Properties of the shell rules, on random command strings.

- A composition of allowed read-only commands — joined by ``;`` ``&&`` ``||`` ``|``
  ``&`` or a newline, nested in ``( … )``, ``{ …; }``, ``$( … )``, backticks,
  ``bash -c '…'``, ``eval``, here-documents, functions, ``if``/``for`` — with **one
  destructive command anywhere** is never allowed, under the example policy nor under
  the deny rules alone: it is denied by ``shell-no-destruction``, or undetermined
  (nested deeper than the facts follow).
- The same compositions **without** the destructive command, from the forms that run
  no shell of their own, are allowed: the first property is not vacuous.

The destructive command itself is drawn too: its program spelled or wrapped in the
ways the facts must see through (``/bin/rm``, ``'rm'``, ``r\\m``, ``sudo``, ``env``,
``timeout 5``...), its flags in every spelling (``-rf``, ``-r -f``, ``-Rf``,
``--recursive``...).
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from typing import Final

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from interlock import Action, Guard, Verdict, load_policy_text

from .case import POLICIES, PolicyName

SETTINGS: Final = settings(
    max_examples=int(os.environ.get("INTERLOCK_PROPERTY_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

GUARDS: Final[dict[PolicyName, Guard]] = {
    name: Guard(load_policy_text(text, file=f"{name}.yaml")) for name, text in POLICIES.items()
}

#: Read-only commands of the example's allow-list, with arguments that are no secret.
SAFE: Final = (
    "ls -la",
    "ls /workspace",
    "pwd",
    "cat README.md",
    "grep -n foo notes.txt",
    "grep -r TODO src",
    "head -n 5 notes.txt",
    "tail -n 3 log.txt",
    "wc -l notes.txt",
    "echo hello",
    "sort data.csv",
    "uniq -c sorted.txt",
    "diff a.txt b.txt",
)

WRAPPERS: Final = (
    "",
    "sudo ",
    "sudo -u root ",
    "env ",
    "env X=1 ",
    "nice ",
    "nice -n 5 ",
    "timeout 5 ",
    "nohup ",
    "command ",
    "exec ",
    "time ",
    "busybox ",
    "stdbuf -oL ",
    "doas ",
    "/usr/bin/env ",
)
RM_SPELLINGS: Final = (
    "rm",
    "\\rm",
    "/bin/rm",
    "/usr/bin/rm",
    "'rm'",
    '"rm"',
    "r\\m",
    "$'\\x72m'",
    "r''m",
)
RM_FLAGS: Final = (
    "-rf",
    "-fr",
    "-r -f",
    "-Rf",
    "-R",
    "-r",
    "--recursive",
    "--recursive --force",
    "--rec",
    "-rfv",
    "-v -r",
    "-f -R --",
)
TARGETS: Final = ("/", "build", "/tmp/x", "~", ".", "node_modules")
OTHER_DESTRUCTION: Final = (
    "dd if=/dev/zero of=/dev/sda",
    "shred -u secret.txt",
    "find . -delete",
    "find / -name x -delete",
    "mkfs.ext4 /dev/sdb1",
    "wipefs -a /dev/sda",
    "git push --force",
    "git push -f origin main",
    "find . -exec rm -rf {} +",
)


@st.composite
def destructive(draw: st.DrawFn) -> str:
    """One destructive command, spelled and wrapped at random."""
    if draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(OTHER_DESTRUCTION))
    wrapper = draw(st.sampled_from(WRAPPERS))
    program = draw(st.sampled_from(RM_SPELLINGS))
    flags = draw(st.sampled_from(RM_FLAGS))
    target = draw(st.sampled_from(TARGETS))
    if draw(st.booleans()):
        return f"{wrapper}{program} {flags} {target}"
    return f"{wrapper}{program} {target} {flags}"  # rm reads options after operands too


# -- compositions ------------------------------------------------------------------------


@dataclass(frozen=True)
class Leaf:
    text: str


@dataclass(frozen=True)
class Join:
    op: str
    left: Node
    right: Node


@dataclass(frozen=True)
class Wrap:
    form: str
    inner: Node


Node = Leaf | Join | Wrap

OPERATORS: Final = (";", "&&", "||", "|", "&", "\n")
#: Forms that run no program of their own: a composition of allowed commands in them
#: is still allowed.
PLAIN_FORMS: Final = ("subshell", "group", "dollar", "backtick", "if", "for")
#: Forms that run a shell, or a program the allow-list does not name: only for the
#: composition that must be refused.
SHELL_FORMS: Final = ("bash -c", "sh -c", "eval", "heredoc", "herestring", "function", "process")


def _tree(forms: tuple[str, ...]) -> st.SearchStrategy[Node]:
    leaves = st.sampled_from(SAFE).map(Leaf)
    return st.recursive(
        leaves,
        lambda children: st.one_of(
            st.builds(Join, st.sampled_from(OPERATORS), children, children),
            st.builds(Wrap, st.sampled_from(forms), children),
        ),
        max_leaves=8,
    )


def _count(node: Node) -> int:
    if isinstance(node, Leaf):
        return 1
    if isinstance(node, Join):
        return _count(node.left) + _count(node.right)
    return _count(node.inner)


def render(node: Node, replace: int | None = None, with_text: str = "") -> str:
    """The command string of ``node``; leaf number ``replace`` (in order) is
    ``with_text`` instead."""
    counter = [0]

    def go(node: Node) -> str:
        if isinstance(node, Leaf):
            index = counter[0]
            counter[0] += 1
            return with_text if index == replace else node.text
        if isinstance(node, Join):
            left, right = go(node.left), go(node.right)
            return f"{left}\n{right}" if node.op == "\n" else f"{left} {node.op} {right}"
        return _wrap(node.form, go(node.inner))

    return go(node)


def _wrap(form: str, inner: str) -> str:
    if form == "subshell":
        return f"( {inner} )"
    if form == "group":
        return f"{{ {inner}; }}"
    if form == "backtick" and "`" not in inner and "\\" not in inner:
        return f"echo `{inner}`"
    if form in ("dollar", "backtick"):
        return f"echo $( {inner} )"
    if form == "if":
        return f"if pwd; then {inner}; fi"
    if form == "for":
        return f"for x in a b; do {inner}; done"
    if form in ("bash -c", "sh -c", "eval"):
        return f"{form} {shlex.quote(inner)}"
    if form == "heredoc":
        return f"bash <<'EOF'\n{inner}\nEOF"
    if form == "herestring":
        return f"bash <<< {shlex.quote(inner)}"
    if form == "function":
        return f"f() {{ {inner}; }}; f"
    assert form == "process"
    return f"cat <( {inner} )"


@st.composite
def with_one_destructive(draw: st.DrawFn) -> str:
    tree = draw(_tree(PLAIN_FORMS + SHELL_FORMS))
    position = draw(st.integers(0, _count(tree) - 1))
    return render(tree, position, draw(destructive()))


def _verdict(policy: PolicyName, command: str) -> tuple[Verdict, tuple[str, ...], str]:
    decision = GUARDS[policy].check(Action.tool("shell", {"command": command}))
    return decision.verdict, decision.rule_ids, decision.reason


@SETTINGS
@given(command=with_one_destructive(), policy=st.sampled_from(["example", "denylist"]))
@example(command="ls /tmp; sudo /bin/rm -Rf /", policy="denylist")
@example(command="echo $( pwd | ( cat README.md && rm -r -f build ) )", policy="example")
@example(command="bash -c 'ls; bash -c '\"'\"'rm -rf /'\"'\"''", policy="denylist")
@example(command="ls `r\\m -fr /`", policy="denylist")
def test_one_destructive_command_anywhere_is_never_allowed(
    command: str, policy: PolicyName
) -> None:
    verdict, rule_ids, reason = _verdict(policy, command)
    assert verdict is not Verdict.ALLOW, (command, reason)
    # It is the destructive-command rule that refuses it (or the string is nested past
    # what the facts follow): not merely the example's default.
    assert verdict is Verdict.UNDETERMINED or "shell-no-destruction" in rule_ids, (
        command,
        verdict,
        rule_ids,
        reason,
    )


@SETTINGS
@given(tree=_tree(PLAIN_FORMS))
@example(tree=Join(";", Leaf("ls -la"), Leaf("pwd")))
def test_the_same_compositions_of_allowed_commands_are_allowed(tree: Node) -> None:
    command = render(tree)
    verdict, rule_ids, reason = _verdict("example", command)
    assert (verdict, rule_ids) == (Verdict.ALLOW, ("shell-read-only",)), (command, reason)
