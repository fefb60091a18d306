"""The walk behind :func:`interlock.facts.shell.shell_facts`: from bash's syntax
tree to the commands a string runs, through wrappers, nested shells, ``find -exec`` and
redirections. Anything it cannot see is recorded as opaque, never guessed."""

from __future__ import annotations

import posixpath
import re
import shlex
import threading
from functools import lru_cache
from typing import TYPE_CHECKING, Final, cast

from interlock.facts.argv import (
    COMMAND_STRING_OPTIONS,
    INTERPRETERS,
    PRIVILEGE,
    SHELLS,
    STDIN_RUNNERS,
    STEERING_VARIABLES,
    SYSTEM_DIRS,
    WRAPPER_VALUES,
    Parsed,
    Word,
    parse_options,
    read_options,
)
from interlock.facts.commands import Command, FileUse, PathUse, UrlUse
from interlock.facts.globs import escape
from interlock.facts.paths import PathError, PathPattern, normalise_path
from interlock.facts.programs import GIT_SUBCOMMANDS, Program, generic, program_spec
from interlock.facts.shellwords import (
    PIPE,
    join_continued_lines,
    node_text,
    read_word,
    substitution_markers,
)

if TYPE_CHECKING:
    from tree_sitter import Node, Parser

__all__ = ["MAX_CHARS", "MAX_COMMANDS", "MAX_DEPTH", "MAX_USES", "Unjudgeable", "Walker"]

#: How deep ``bash -c "bash -c '…'"`` and ``$( $( … ) )`` are followed.
MAX_DEPTH: Final = 8
#: The most simple commands one string may hold before it is refused as unjudgeable.
MAX_COMMANDS: Final = 2_000
#: The longest command string read as shell (the policy's max_param_chars bounds
#: every parameter; this bounds the parse whatever that limit is set to).
MAX_CHARS: Final = 262_144
#: The most files and URLs one command string may name before it is unjudgeable.
MAX_USES: Final = 4_096

#: Node types no command can be inside: the walk does not descend into them.
_LEAVES: Final = frozenset(
    {
        "word",
        "raw_string",
        "number",
        "string_content",
        "variable_name",
        "file_descriptor",
        "comment",
        "ansi_c_string",
        "heredoc_start",
        "heredoc_end",
        "heredoc_content",
        "special_variable_name",
        "test_operator",
        "regex",
    }
)
#: Nodes that open a substitution bash runs (accounted against the raw text).
_SUBSTITUTIONS: Final = frozenset(
    {"command_substitution", "process_substitution", "arithmetic_expansion"}
)
#: [[ … ]] operators whose operands bash evaluates as arithmetic.
_ARITHMETIC_TESTS: Final = frozenset({"-eq", "-ne", "-lt", "-le", "-gt", "-ge"})
#: Parents whose assignments are judged with them (a prefix `X=1 cmd`, `export X=1`).
_ASSIGNMENT_HANDLED: Final = frozenset({"command", "declaration_command"})
#: Wrappers that run their command as it is (the command is what is judged).
_TRANSPARENT: Final = frozenset(WRAPPER_VALUES) - PRIVILEGE - {"xargs", "watch", "flock"}
#: Wrappers whose options may follow their operands (GNU getopt's permutation).
_PERMUTING: Final = frozenset({"su", "runuser", "script"})
#: Operands a wrapper takes before the command it runs.
_POSITIONAL: Final = {"timeout": 1, "chroot": 1, "taskset": 1, "chrt": 1}
#: Marks the inner command as a string a shell runs (see Walker._unwrap).
_SHELL_STRING: Final = Word("", "", True, False)
#: Words whose presence means a variable may be set (an assignment, a loop, read, a
#: function): plain substring tests, cheaper than one regex over the text.
_MAY_ASSIGN: Final = ("=", "for", "read", "mapfile", "getopts", "printf", "let", "unset", "(")


def _may_assign(text: str) -> bool:
    return any(word in text for word in _MAY_ASSIGN)


_AWK_EXEC: Final = re.compile(r"\bsystem\s*\(|\|\s*getline|\|\s*\"|print[^;}]*\|")
_SED_EXEC: Final = re.compile(
    r"(?:^|[;{}\n]\s*)e(?:\s|$|;)|s(.)(?:(?!\1).|\\.)*\1(?:(?!\1).|\\.)*\1[a-zA-Z0-9]*e"
)
_SED_WRITE: Final = re.compile(
    r"(?:^|[;{}\n]\s*)[wW]\s*\S|s(.)(?:(?!\1).|\\.)*\1(?:(?!\1).|\\.)*\1[a-zA-Z0-9]*w"
)


#: ``/dev/tcp/HOST/PORT`` and ``/dev/udp/...``: a network connection in bash.
_DEV_SOCKET: Final = re.compile(r"^/dev/(?:tcp|udp)/([^/]+)/(\d+)$")
#: An operand that is a URL, whatever the program (``git clone https://…``).
_URL_OPERAND: Final = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
#: Programs whose first operand is a host they connect to.
_HOST_FIRST: Final = frozenset({"nc", "ncat", "netcat", "telnet", "socat"})


def _short(text: str, limit: int = 80) -> str:
    """A command's text for a message: its start (a message never grows with the
    input, however deep the nesting)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Unjudgeable(Exception):
    """The string (or a part that decides it) cannot be judged."""


_local = threading.local()


def _parser() -> Parser:
    parser: Parser | None = getattr(_local, "parser", None)
    if parser is None:
        from tree_sitter import Language, Parser

        from interlock._extension import load_extension

        # The grammar's extension only: its package's __init__ imports
        # importlib.resources for a query file never read here (ADR 0014).
        grammar = load_extension("tree_sitter_bash", "_binding")
        parser = Parser(Language(grammar.language()))
        _local.parser = parser
    return parser


class Walker:
    """Walks one command string's syntax tree into commands, files and URLs."""

    def word(self, node: Node) -> Word:
        return read_word(node, self.variables, self.loops)

    def __init__(self) -> None:
        self.commands: list[Command] = []
        self.paths: list[PathUse] = []
        self.urls: list[UrlUse] = []
        self.opaque: list[str] = []
        self.variables: dict[str, str | None] = {}  # name -> static value, None: unknown
        self.loops: dict[str, tuple[str, ...]] = {}  # a for loop's variable: its values
        self.functions: set[str] = set()
        self.data = b""  # the bytes of the string being walked

    # -- scripts -------------------------------------------------------------------

    def script(self, text: str, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise Unjudgeable(f"commands are nested more than {MAX_DEPTH} levels deep")
        if "\x00" in text:
            raise Unjudgeable("the command holds a NUL byte")
        if "\\\n" in text or "\n\\" in text:
            # bash removes a backslash-newline before it reads words (`/e\⏎tc` is
            # /etc); the parser splits the word there instead. Do as bash does.
            text = join_continued_lines(text)
        if not text.endswith("\n"):
            # What bash reads ends its last line; and tree-sitter-bash, handed a pipeline
            # of three stages that ends at the end of its input, explores alternatives
            # for ~60 µs (7 µs with the newline).
            text += "\n"
        data = text.encode("utf-8", "surrogatepass")
        saved, self.data = self.data, data
        try:
            self._script(data, text, depth)
        finally:
            self.data = saved

    def _snippet(self, node: Node) -> str:
        """The start of ``node``'s text (never its whole text: a command deep in
        nested substitutions would copy them all, for every level)."""
        start = node.start_byte
        end = min(node.end_byte, start + 200)
        return _short(self.data[start:end].decode("utf-8", "replace"))

    def _script(self, data: bytes, text: str, depth: int) -> None:
        tree = _parser().parse(data)
        root = tree.root_node
        if root.has_error:
            raise Unjudgeable(f"the command cannot be parsed as shell: {_near_error(root)}")
        if _may_assign(text):  # most commands set no variable: skip the pass
            self._assignments(root)
        placed: set[int] = set()
        inert: list[tuple[int, int]] = []  # bodies of here-documents with a quoted word
        self._walk(root, depth, placed, inert)
        if "`" in text or "$(" in text or "$[" in text or "(" in text:
            stray = {
                at
                for at in substitution_markers(data) - placed
                if not any(start <= at < end for start, end in inert)
            }
            if stray:
                at = min(stray)
                self.opaque.append(
                    f"a command substitution at character {at + 1} is run by bash where "
                    "the parser does not see one (in a here-document or an expansion)"
                )

    def _assignments(self, root: Node) -> None:
        """Variables set in the script: a name set once to a static value is known;
        set twice, dynamically, by ``read`` or a loop, unknown."""
        seen: dict[str, int] = {}
        stack = [root]
        while stack:
            node = stack.pop()
            kind = node.type
            if kind == "variable_assignment":
                name_node = node.child_by_field_name("name")
                parent = node.parent
                if parent is not None and parent.type == "command":
                    pass  # `X=ls echo`: X is set for echo's environment only
                elif name_node is not None:
                    name = node_text(name_node)
                    seen[name] = seen.get(name, 0) + 1
                    value = node.child_by_field_name("value")
                    word = self.word(value) if value is not None else Word("", "", True, False)
                    known = word.text if word.exact else None
                    self.variables[name] = known if seen[name] == 1 else None
            elif kind == "for_statement":
                variable = node.child_by_field_name("variable")
                if variable is not None:
                    values = [self.word(v) for v in node.children_by_field_name("value")]
                    name = node_text(variable)
                    if values and all(v.exact for v in values) and name not in seen:
                        # each value in turn: kept as the list of what it can be
                        self.loops[name] = tuple(v.text for v in values)
                    self.variables[name] = None
                    seen[name] = seen.get(name, 0) + 2
            elif kind == "unset_command":
                for child in node.named_children:
                    self.variables[node_text(child)] = None
                    seen[node_text(child)] = seen.get(node_text(child), 0) + 2
            elif kind == "function_definition":
                name_node = node.child_by_field_name("name")
                if name_node is not None:
                    self.functions.add(node_text(name_node))
            elif kind == "command":
                name_node = node.child_by_field_name("name")
                if name_node is not None and node_text(name_node) in (
                    "read",
                    "mapfile",
                    "readarray",
                    "getopts",
                    "printf",
                    "let",
                ):
                    for child in node.children_by_field_name("argument"):
                        target = node_text(child)
                        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", target):
                            self.variables[target] = None
            stack.extend(node.children)

    def _walk(self, root: Node, depth: int, placed: set[int], inert: list[tuple[int, int]]) -> None:
        stack = [root]
        while stack:
            node = stack.pop()
            kind = node.type
            if kind in _LEAVES:
                continue  # no command can be inside
            if kind in _SUBSTITUTIONS:
                placed.add(node.start_byte)
                if kind == "command_substitution" and node_text(node).startswith("`"):
                    placed.add(node.end_byte - 1)
                if kind == "arithmetic_expansion":
                    self._arithmetic(node)
            elif kind == "c_style_for_statement" or (
                kind == "compound_statement" and node_text(node).startswith("((")
            ):
                self._arithmetic(node)
            elif kind == "subscript":
                index = node.child_by_field_name("index")
                if index is not None:
                    self._arithmetic(index, whole=True)
            elif kind == "expansion":
                self._expansion_operators(node)
            elif kind == "heredoc_redirect":
                start = next((c for c in node.children if c.type == "heredoc_start"), None)
                quoted = start is not None and any(q in node_text(start) for q in "'\"\\")
                for body in node.children:
                    if body.type != "heredoc_body":
                        continue
                    if quoted:  # <<'EOF': read as it is written
                        inert.append((body.start_byte, body.end_byte))
                    else:  # bash runs its backticks; the parser leaves them as text
                        self._heredoc_backticks(body, depth, placed)
            elif kind == "binary_expression":
                operator = node.child_by_field_name("operator")
                if operator is not None and node_text(operator) in _ARITHMETIC_TESTS:
                    for side in ("left", "right"):
                        operand = node.child_by_field_name(side)
                        if operand is not None:
                            self._arithmetic(operand, whole=True)
            if kind == "command":
                self._command(node, depth)
            elif kind in ("declaration_command", "unset_command"):
                first = node.children[0] if node.children else None
                program = node_text(first) if first is not None else "declare"
                self._add(Command(program, program, frozenset(), (), text=self._snippet(node)))
                for child in node.named_children:
                    if child.type == "variable_assignment":
                        self._steering(child)
            elif kind == "variable_assignment":
                parent = node.parent
                if parent is not None and parent.type not in _ASSIGNMENT_HANDLED:
                    self._steering(node)  # `PATH=/tmp; ls`: a statement of its own
            elif kind == "file_redirect":
                self._redirect(node)
            elif kind == "ERROR" or node.is_missing:
                raise Unjudgeable("the command cannot be parsed as shell")
            children = node.named_children
            if children:
                stack.extend(reversed(children))

    def _heredoc_backticks(self, body: Node, depth: int, placed: set[int]) -> None:
        data = self.data
        marks: list[int] = []
        i, end = body.start_byte, body.end_byte
        while i < end:
            byte = data[i : i + 1]
            if byte == b"\\":
                i += 2
                continue
            if byte == b"`":
                marks.append(i)
            i += 1
        for opening, closing in zip(marks[::2], marks[1::2], strict=False):
            if any(opening < at < closing for at in placed):
                continue  # a substitution the parser placed inside: walked already
            inner = data[opening + 1 : closing].decode("utf-8", "replace")
            placed.update((opening, closing))
            self._nested(Word(inner, "*", True, False), (), depth, "a here-document")

    def _arithmetic(self, node: Node, *, whole: bool = False) -> None:
        """Arithmetic evaluation reads a variable's value as an expression, and an
        array subscript in it runs a command substitution (``X='a[$(rm -rf /)]'; echo
        $((X))``): any variable in it whose value is not a known number is opaque."""
        names: list[str] = []
        stack = [node]
        while stack:
            current = stack.pop()
            kind = current.type
            if kind in ("variable_name", "simple_expansion", "expansion") or (
                kind == "word" and (whole or current is not node)
            ):
                text = node_text(current).lstrip("$").strip("{}")
                if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text):
                    names.append(text)
                    continue
            stack.extend(current.named_children)
        for name in names:
            value = self.variables.get(name)
            if value is None or not re.fullmatch(r"\s*-?[0-9]+\s*", value):
                self.opaque.append(
                    f"arithmetic on `{name}` runs any command substitution its value holds"
                )
                return

    def _expansion_operators(self, node: Node) -> None:
        text = node_text(node)
        if text.endswith("@P}"):
            self.opaque.append(f"`{_short(text)}` expands a value as a prompt, which runs commands")
        for index, child in enumerate(node.children):
            if node.field_name_for_child(index) == "operator" and node_text(child) == ":":
                for rest in node.children[index + 1 :]:
                    if rest.is_named:
                        self._arithmetic(rest, whole=True)  # ${Y:X}: offsets are arithmetic

    def _steering(self, assignment: Node) -> None:
        name_node = assignment.child_by_field_name("name")
        if name_node is not None and node_text(name_node) in STEERING_VARIABLES:
            self.opaque.append(f"`{self._snippet(assignment)}` changes what later commands run")

    # -- commands ------------------------------------------------------------------

    def _command(self, node: Node, depth: int) -> None:
        name_node = node.child_by_field_name("name")
        if b"=" in self.data:  # a prefix assignment (`PATH=/tmp ls`) needs one
            for child in node.children:
                if child.type == "variable_assignment":
                    self._steering(child)
        if name_node is None:
            return  # assignments only
        words = [self.word(name_node)]
        words += [self.word(arg) for arg in node.children_by_field_name("argument")]
        feed = _fed_text(node, self) if b"<<" in self.data else None
        self._argv(words, via=(), depth=depth, text=self._snippet(node), feed=feed)

    def _argv(
        self,
        words: list[Word],
        *,
        via: tuple[str, ...],
        depth: int,
        text: str,
        feed: str | None = None,
        extra_dynamic: bool = False,
    ) -> None:
        if len(self.commands) > MAX_COMMANDS:
            raise Unjudgeable(f"the command holds more than {MAX_COMMANDS} simple commands")
        if not words:
            return
        head = words[0]
        if not head.exact:
            self.opaque.append(f"the program of `{_short(text)}` is not known until it runs")
            for word in words[1:]:
                if not (word.exact and word.text.startswith("-")):
                    self._touch(word, "touched", "?")
            return
        program, name = _resolve(head.text)
        args = words[1:]
        if name in PRIVILEGE:
            self._add(
                Command(
                    program, name, frozenset(), tuple(w.pattern for w in args), via=via, text=text
                )
            )
            self._privileged(name, args, (*via, name), depth, text)
            return
        if name in _TRANSPARENT or name == "busybox":
            inner = self._unwrap(name, args) if name != "busybox" else (args or None)
            if inner is None:
                self._add(Command(program, name, frozenset(), (), via=via, text=text))
            elif inner and inner[0] is not _SHELL_STRING:
                extra = name == "parallel"  # its arguments come after ::: (or its input)
                self._argv(
                    inner, via=(*via, name), depth=depth, text=text, feed=feed, extra_dynamic=extra
                )
            else:
                self._run_inner(inner, (*via, name), depth, text)
            return
        if name in STDIN_RUNNERS:
            self._add(Command(program, name, frozenset(), (), via=via, text=text))
            self.opaque.append(
                f"`{_short(text)}` runs commands from its input, which Interlock cannot see"
            )
            return
        if name == "trap":
            self._add(Command(program, name, frozenset(), (), via=via, text=text))
            handler = next((w for w in args if not w.text.startswith("-")), None)
            if handler is not None and len(args) > 1:
                self._nested(handler, (*via, name), depth, text)  # run when the signal comes
            return
        if name == "xargs":
            inner = self._unwrap(name, args)
            if inner is None or not inner:
                inner = [Word("echo", "echo", True, False)]
            self._argv(inner, via=(*via, name), depth=depth, text=text, extra_dynamic=True)
            return
        if name in ("watch", "flock"):
            self._watch_flock(name, args, via, depth, text)
            return
        if name in SHELLS or name == "eval":
            self._shell(program, name, args, via, depth, text, feed)
            return
        if name == "ssh":
            self._ssh(program, args, via, depth, text)
            return
        if name == "find":
            self._find(program, args, via, depth, text)
            return
        self._plain(program, name, args, via, text, extra_dynamic)

    def _plain(
        self,
        program: str,
        name: str,
        args: list[Word],
        via: tuple[str, ...],
        text: str,
        extra_dynamic: bool = False,
    ) -> None:
        spec = program_spec(name)
        interpreter = _interpreter(name)
        if interpreter is not None:
            spec = _interpreter_spec(interpreter)
        subcommand: str | None = None
        parsed = parse_options(spec, args, stop_at_operand=spec.operands == "subcommand")
        operands = parsed.operands
        flags = parsed.flags
        if spec.operands == "subcommand" and operands:
            head = operands[0]
            subcommand = head.text if head.exact else "*"
            sub = GIT_SUBCOMMANDS.get(head.text) if name == "git" and head.exact else None
            rest = parse_options(sub or generic, operands[1:])
            flags = flags | rest.flags
            operands = [head, *rest.operands]
            parsed.file_options.extend(rest.file_options)
            parsed.dynamic_flags = parsed.dynamic_flags or rest.dynamic_flags
            if sub is not None and sub.operands == "delete":
                for word in rest.operands:
                    self._touch(word, "delete", program)
            if name == "git" and subcommand == "push":
                refspecs = [w.text for w in rest.operands[1:] if w.exact]
                if any(r.startswith("+") for r in refspecs):
                    flags = flags | {"--force"}  # +main forces the update, as --force does
                if any(r.startswith(":") for r in refspecs):
                    flags = flags | {"--delete"}  # :main deletes the remote branch
        runs_code = False
        if interpreter is not None:
            runs_code = bool(parsed.seen & interpreter) or not operands
        if name in ("awk", "gawk", "mawk", "nawk"):
            script = parsed.script or (operands[0] if operands else None)
            if script is None or not script.static or _AWK_EXEC.search(script.text):
                self.opaque.append(f"`{_short(text)}` runs commands inside its awk program")
        if name == "sed":
            script = parsed.script or (operands[0] if operands else None)
            if script is not None and script.static and _SED_WRITE.search(script.text):
                self._touch(Word("*", "*", False, True), "write", program)
            if script is None or not script.static or _SED_EXEC.search(script.text):
                self.opaque.append(f"`{_short(text)}` runs commands inside its sed script")
        dynamic = extra_dynamic or any(not w.static for w in args)
        command = Command(
            program=program,
            name=name,
            flags=flags,
            operands=tuple(w.text if w.exact else w.pattern for w in operands),
            subcommand=subcommand,
            via=via,
            dynamic=dynamic,
            dynamic_flags=parsed.dynamic_flags or extra_dynamic,
            runs_code=runs_code,
            text=text,
        )
        self._add(command)
        for option, word in parsed.file_options:
            use = spec.file_options.get(option) or spec.file_options.get(spec.canonical(option))
            if use is not None:
                self._touch(word, use, program)
        for _, word in parsed.url_options:
            self._url(word, program)
        self._option_uses(spec, parsed, program, text)
        if extra_dynamic:
            self._touch(Word("*", "*", False, True), "touched", program)
        before = len(self.paths)
        self._operands(spec, name, parsed, operands, flags, program)
        if _recursive(name, flags):
            for used in self.paths[before:]:
                tree = _tree_of(used.path)
                if tree is not None:
                    self.paths.append(PathUse(tree, used.use, program))
        if spec.operands != "urls" and b"://" in self.data:
            for word in operands:
                if word.exact and _URL_OPERAND.match(word.text):
                    self._url(word, program)
        if name in _HOST_FIRST and operands:
            self._host(operands[0], program, "tcp")

    def _option_uses(self, spec: Program, parsed: Parsed, program: str, text: str) -> None:
        """Files and programs option values name: ``curl -d @file``, ``-F k=@file``,
        ``wget -i urls.txt``, ``sort --compress-program=prog``."""
        if spec.exec_options and not spec.exec_options.isdisjoint(parsed.seen | parsed.flags):
            self.opaque.append(f"`{_short(text)}` runs a program an option names")
        for option, word in parsed.values:
            canonical = spec.canonical(option)
            if option in spec.at_file_options or canonical in spec.at_file_options:
                if word.text.startswith("@") and word.text != "@-":
                    self._touch(_tail(word, 1), "read", program)
            elif option in spec.form_options or canonical in spec.form_options:
                _, eq, value = word.text.partition("=")
                if eq and value[:1] in ("@", "<"):
                    self._touch(_tail(word, len(word.text) - len(value) + 1), "read", program)
            elif option in spec.url_list_options or canonical in spec.url_list_options:
                self._touch(word, "read", program)
                self._url(Word("", "*", False, False), program)  # the URLs it lists

    def _operands(
        self,
        spec: Program,
        name: str,
        parsed: Parsed,
        operands: list[Word],
        flags: frozenset[str],
        program: str,
    ) -> None:
        role = spec.operands
        if role in {"none", "subcommand"}:
            return
        if role in ("pattern-then-read", "script-then-read"):
            files = operands if parsed.script is not None else operands[1:]
            use: FileUse = "read"
            if name == "sed" and "--in-place" in flags:
                use = "write"
            if name in ("awk", "gawk", "mawk", "nawk"):
                files = [w for w in files if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w.text)]
            for word in files:
                self._touch(word, use, program)
            return
        if role in ("copy", "move", "link"):
            target_given = any(o in ("-t", "--target-directory") for o, _ in parsed.file_options)
            sources = operands if target_given else operands[:-1]
            destination = [] if target_given else operands[-1:]
            source_use: FileUse = "delete" if role == "move" else "read"
            if role == "link":
                sources = []
            for word in sources:
                self._touch(word, source_use, program)
                if role == "move":
                    self._touch(word, "read", program)
            for word in destination:
                self._touch(word, "write", program)
            return
        if role == "mode-then-write":
            reference = any(o == "--reference" for o, _ in parsed.file_options)
            for word in operands if reference else operands[1:]:
                self._touch(word, "write", program)
            return
        if role == "dd":
            for word in operands:
                key, eq, value = word.text.partition("=")
                if not eq:
                    continue
                inner = Word(value, word.pattern.partition("=")[2], word.static, word.magic)
                if key == "if":
                    self._touch(inner, "read", program)
                elif key == "of":
                    self._touch(inner, "write", program)
            return
        if role == "urls":
            for word in operands:
                self._url(word, program)
            return
        if role == "read-then-write":
            if operands:
                self._touch(operands[0], "read", program)
            if len(operands) > 1:
                self._touch(operands[1], "write", program)
            return
        use = cast(FileUse, role)  # read / write / delete / touched: what is left
        for word in operands:
            self._touch(word, use, program)

    def _add(self, command: Command) -> None:
        self.commands.append(command)

    def _touch(self, word: Word, use: FileUse, program: str) -> None:
        if "HOME" in self.variables and word.static and word.text.startswith("~"):
            word = self._rehome(word)
        if word.exact:
            if not word.text or word.text in ("-", PIPE):
                return
            try:
                path = normalise_path(word.text)
            except PathError as exc:
                raise Unjudgeable(str(exc)) from None
        else:
            try:
                path = normalise_path(word.pattern) if word.pattern else word.pattern
            except PathError as exc:
                raise Unjudgeable(str(exc)) from None
            path = PathPattern(path or "*")
        if len(self.paths) >= MAX_USES:
            raise Unjudgeable(f"the command names more than {MAX_USES} files")
        self.paths.append(PathUse(path, use, program))
        socket = _DEV_SOCKET.match(path) if path.startswith("/dev/") else None
        if socket is not None:  # bash opens a connection for /dev/tcp/HOST/PORT
            host, port = socket.groups()
            self._url(Word(f"http://{host}:{port}/", "", type(path) is str, False), program)

    def _host(self, word: Word, program: str, scheme: str) -> None:
        """A host a command connects to (``ssh user@host``, ``nc host 80``)."""
        if not word.exact:
            self._url(Word("", f"{scheme}://*", False, False), program)
            return
        host = word.text.rpartition("@")[2].partition(":")[0] if scheme == "ssh" else word.text
        if host and not host.startswith("-"):
            self._url(Word(f"{scheme}://{host}/", "", True, False), program)

    def _rehome(self, word: Word) -> Word:
        """``~/x`` when the string set HOME itself: HOME's value, or unknown."""
        text = word.text
        head, slash, rest = text.partition("/")
        if head != "~":
            return word  # ~user: another user's home, not HOME
        home = self.variables.get("HOME")
        if home is None:
            return Word(text, "*" + slash + escape(rest), False, False)
        joined = home + slash + rest
        return Word(joined, escape(joined), True, False)

    def _url(self, word: Word, program: str) -> None:
        if len(self.urls) >= MAX_USES:
            raise Unjudgeable(f"the command names more than {MAX_USES} URLs")
        if word.static and not (word.magic and not _literal_url(word.text)):
            # A glob that matches no file stays as written: a URL's brackets
            # (http://[::1]/) are only a glob to bash, and match nothing.
            text = word.text
            if text.startswith("@") or not text:
                return
            self.urls.append(UrlUse(text, program))
        else:
            self.urls.append(UrlUse(word.pattern, program, exact=False))

    # -- wrappers and shells -------------------------------------------------------

    def _unwrap(self, name: str, args: list[Word]) -> list[Word] | None:
        """The inner command of a wrapper; None when it runs none (``env`` alone,
        ``command -v``, ``su root``); [] when it cannot be known; ``[_SHELL_STRING,
        word]`` when it runs a string with a shell (``su -c``, ``sudo -s``)."""
        shorts, longs = WRAPPER_VALUES.get(name, ("", frozenset()))
        options = read_options(args, shorts, longs, permute=name in _PERMUTING)
        if options.unknown:
            return []  # an option (or the command) we cannot see
        if name == "command" and options.flags & {"-v", "-V"}:
            return None
        for option in COMMAND_STRING_OPTIONS.get(name, frozenset()):
            if option in options.values:
                return [_SHELL_STRING, options.values[option]]
        rest = args[options.operands :]
        if name == "env":
            split = options.values.get("-S") or options.values.get("--split-string")
            if split is not None:
                if not split.static:
                    return []
                try:
                    words = shlex.split(split.text)
                except ValueError:
                    return []
                rest = [Word(w, escape(w), True, False) for w in words] + rest
            while rest and rest[0].static and "=" in rest[0].text:
                key = rest[0].text.partition("=")[0]
                if key in STEERING_VARIABLES:
                    self.opaque.append(f"`{_short(rest[0].text)}` changes what the command runs")
                rest = rest[1:]
        if name in ("sudo", "doas") and options.flags & {"-s", "-i", "--shell", "--login"}:
            if not rest:
                return None  # an interactive shell: the wrapper itself is the command
            joined = " ".join(w.text for w in rest)
            return [_SHELL_STRING, Word(joined, "*", all(w.static for w in rest), False)]
        if name in ("su", "script"):
            return None  # no command string: an interactive shell
        skip = _POSITIONAL.get(name, 0)
        if name == "runuser" and not {"-u", "--user"} & set(options.values):
            skip = 1  # runuser USER COMMAND... (the user is an operand)
        inner = rest[skip:]
        if name == "parallel":
            marker = next((i for i, w in enumerate(inner) if w.text.startswith(":::")), None)
            inner = inner[:marker] if marker is not None else inner
        return inner or None

    def _privileged(
        self, name: str, args: list[Word], via: tuple[str, ...], depth: int, text: str
    ) -> None:
        if name == "sudoedit":
            for word in args:
                if not word.text.startswith("-"):
                    self._touch(word, "write", name)
            return
        if name == "sudo":
            options = read_options(args, *WRAPPER_VALUES["sudo"])
            if options.flags & {"-e", "--edit"}:
                for target in args[options.operands :]:
                    self._touch(target, "write", name)
                return
        self._run_inner(self._unwrap(name, args), via, depth, text)

    def _run_inner(
        self, inner: list[Word] | None, via: tuple[str, ...], depth: int, text: str
    ) -> None:
        if inner is None:
            return
        if not inner:
            self.opaque.append(f"`{_short(text)}` runs a command that is not known until it runs")
        elif inner[0] is _SHELL_STRING:
            self._nested(inner[1], via, depth, text)
        else:
            self._argv(inner, via=via, depth=depth, text=text)

    def _watch_flock(
        self, name: str, args: list[Word], via: tuple[str, ...], depth: int, text: str
    ) -> None:
        self._add(Command(name, name, frozenset(), (), via=via, text=text))
        if name == "flock":
            shorts, longs = WRAPPER_VALUES["flock"]
            options = read_options(args, shorts, longs)
            rest = args[options.operands :]
            if rest:
                self._touch(rest[0], "write", name)  # the lock file
            string = options.values.get("-c") or options.values.get("--command")
            after = read_options(rest[1:], "c", frozenset({"--command"}))  # flock FILE -c …
            string = string or after.values.get("-c") or after.values.get("--command")
            if string is not None:
                self._nested(string, (*via, name), depth, text)
            elif options.unknown or after.unknown:
                self.opaque.append(
                    f"`{_short(text)}` runs a command that is not known until it runs"
                )
            elif len(rest) > 1:
                self._argv(rest[1:], via=(*via, name), depth=depth, text=text)
            return
        exec_direct = any(w.static and w.text in ("-x", "--exec") for w in args)
        inner = self._unwrap(name, args)
        if not inner:
            if inner == []:
                self.opaque.append(
                    f"`{_short(text)}` runs a command that is not known until it runs"
                )
            return
        if exec_direct:
            self._argv(inner, via=(*via, name), depth=depth, text=text)
        else:  # watch runs its arguments, joined, with sh -c
            joined = " ".join(w.text for w in inner)
            self._nested(
                Word(joined, escape(joined), all(w.static for w in inner), False),
                (*via, name),
                depth,
                text,
            )

    def _shell(
        self,
        program: str,
        name: str,
        args: list[Word],
        via: tuple[str, ...],
        depth: int,
        text: str,
        feed: str | None,
    ) -> None:
        self._add(
            Command(program, name, frozenset(), tuple(w.pattern for w in args), via=via, text=text)
        )
        if name == "eval":
            if not args:
                return
            joined = " ".join(w.text for w in args)
            self._nested(Word(joined, "*", all(w.static for w in args), False), via, depth, text)
            return
        index = 0
        while index < len(args):
            word = args[index]
            if not word.static:
                self.opaque.append(
                    f"`{_short(text)}` runs a shell with options not known until it runs"
                )
                return
            option = word.text
            if option == "--":
                index += 1
                break
            if (option.startswith("-") and len(option) > 1) or option.startswith("+"):
                if "c" in option.lstrip("-+") and not option.startswith("--"):
                    if index + 1 >= len(args):
                        self.opaque.append(f"`{_short(text)}` runs a shell without its command")
                        return
                    self._nested(args[index + 1], (*via, name), depth, text)
                    return
                if option in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
                    index += 2
                    continue
                index += 1
                continue
            break
        if index < len(args):  # a script file: its content is not in the command
            script = args[index]
            self._touch(script, "read", program)
            self.opaque.append(
                f"`{_short(text)}` runs the script {script.text or script.pattern!r}, whose "
                "commands Interlock cannot see"
            )
            return
        if feed is not None:
            self._nested(Word(feed, "*", True, False), (*via, name), depth, text)
            return
        self.opaque.append(
            f"`{_short(text)}` runs commands from its input, which Interlock cannot see"
        )

    def _nested(self, word: Word, via: tuple[str, ...], depth: int, text: str) -> None:
        if not word.static:
            self.opaque.append(f"`{_short(text)}` runs a command string not known until it runs")
            return
        saved = self.variables
        self.variables = dict(saved)
        try:
            self.script(word.text, depth + 1)
        finally:
            self.variables = saved

    def _ssh(
        self, program: str, args: list[Word], via: tuple[str, ...], depth: int, text: str
    ) -> None:
        options = read_options(args, "bcDEeFIiJLlmOopQRSWw", frozenset())
        if options.unknown:
            self.opaque.append(f"`{_short(text)}` has ssh options not known until it runs")
            return
        for value in options.values.values():
            if value.static and re.match(
                r"(?i)(proxycommand|localcommand|permitlocalcommand)", value.text
            ):
                self.opaque.append(f"`{_short(text)}` runs a local command through an ssh option")
        index = options.operands
        host = args[index] if index < len(args) else None
        remote = args[index + 1 :]
        if host is not None:
            self._host(host, "ssh", "ssh")
        self._add(
            Command(
                program, "ssh", frozenset(), (host.pattern,) if host else (), via=via, text=text
            )
        )
        if remote:
            joined = " ".join(w.text for w in remote)
            self._nested(
                Word(joined, "*", all(w.static for w in remote), False),
                (*via, "ssh"),
                depth,
                text,
            )

    def _find(
        self, program: str, args: list[Word], via: tuple[str, ...], depth: int, text: str
    ) -> None:
        roots: list[Word] = []
        index = 0
        while index < len(args) and not _find_expression(args[index]):
            roots.append(args[index])
            index += 1
        if not roots:
            roots = [Word(".", ".", True, False)]
        flags: set[str] = set()
        dynamic = any(not w.static for w in args)
        inner_commands: list[list[Word]] = []
        while index < len(args):
            word = args[index]
            option = word.text if word.static else ""
            if option in ("-exec", "-execdir", "-ok", "-okdir"):
                flags.add(option)
                end = index + 1
                while end < len(args) and not (args[end].static and args[end].text in (";", "+")):
                    end += 1
                inner_commands.append(args[index + 1 : end])
                index = end + 1
                continue
            if option in ("-fprint", "-fprint0", "-fls", "-fprintf"):
                flags.add(option)
                if index + 1 < len(args):
                    self._touch(args[index + 1], "write", program)
                index += 3 if option == "-fprintf" else 2
                continue
            if option.startswith("-"):
                flags.add(option)
            index += 1
        self._add(
            Command(
                program,
                "find",
                frozenset(flags),
                tuple(w.text if w.exact else w.pattern for w in roots),
                via=via,
                dynamic=dynamic,
                text=text,
            )
        )
        use: FileUse = "delete" if "-delete" in flags else "read"
        for root in roots:
            self._touch(root, "read", program)  # find lists the names below its roots
            if use == "delete":
                self._touch(_tree(root), "delete", program)
        for inner in inner_commands:
            # {} is a path find found under a root: never a flag (a root is given first)
            below = _tree(roots[0]) if len(roots) == 1 else Word("{}", "*", False, False)
            found = [below if w.text == "{}" else w for w in inner]
            found = [Word(w.text, "*", False, False) if "{}" in w.text else w for w in found]
            if found:
                self._argv(found, via=(*via, "find"), depth=depth, text=text)

    # -- redirections --------------------------------------------------------------

    def _redirect(self, node: Node) -> None:
        operator = ""
        destination: Node | None = None
        descriptor_given = False
        for index, child in enumerate(node.children):
            field_name = node.field_name_for_child(index)
            if field_name == "destination":
                destination = child
            elif field_name == "descriptor":
                descriptor_given = True
            elif not child.is_named:
                operator += child.type
        if destination is None:
            return
        if destination.type == "number" and ("&" in operator):
            return  # 2>&1: a descriptor, not a file
        word = self.word(destination)
        if word.static and word.text == "-" and "&" in operator:
            return  # >&- closes a descriptor
        del descriptor_given
        use: FileUse = "read" if operator in ("<",) else "write"
        if operator in ("<&", ">&") and word.static and word.text.isdigit():
            return
        self._touch(word, use, "redirect")


# -- helpers ---------------------------------------------------------------------------


def _near_error(root: Node) -> str:
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type == "ERROR" or node.is_missing:
            snippet = node_text(node)[:40] or node.type
            return f"unexpected {snippet!r} at character {node.start_byte + 1}"
        stack.extend(reversed([c for c in node.children if c.has_error or c.is_missing]))
    return "unbalanced quotes or brackets"


def _resolve(word: str) -> tuple[str, str]:
    """(program, name): ``/bin/rm`` -> (rm, rm); ``./rm`` -> (./rm, rm)."""
    if "/" not in word:
        return word, word
    directory, _, base = word.rstrip("/").rpartition("/")
    directory = posixpath.normpath(directory or "/")
    if directory in SYSTEM_DIRS:
        return base, base
    return word, base


@lru_cache(maxsize=1024)
def _interpreter(name: str) -> frozenset[str] | None:
    for prefix, options in INTERPRETERS.items():
        if name == prefix or (
            name.startswith(prefix) and re.fullmatch(r"[\d.]*", name[len(prefix) :])
        ):
            return options
    return None


@lru_cache(maxsize=64)
def _interpreter_spec(options: frozenset[str]) -> Program:
    """An interpreter reads the code option's value (not an operand), then runs a
    script file (read) with its arguments."""
    return Program(
        operands="read",
        short_values="".join(o[1] for o in options if len(o) == 2 and o[0] == "-"),
        long_values=frozenset(o for o in options if o.startswith("--") or len(o) > 2),
        file_options={},
        aliases={},
        single_dash_long=any(len(o) > 2 and not o.startswith("--") for o in options),
    )


_RECURSIVE_FLAGS: Final = frozenset({"--recursive", "--dereference-recursive", "--archive"})


def _recursive(name: str, flags: frozenset[str]) -> bool:
    """Whether the command reads (or writes) the whole tree below a directory it is
    given: grep -r, diff -r, cp -r, chmod -R, rsync -a, zip -r, tar..."""
    if name in ("du", "tree", "ls", "find"):
        return False  # sizes and names, not contents (find is judged on its own)
    return (
        bool(flags & _RECURSIVE_FLAGS)
        or name == "tar"
        or (name in ("zip", "scp") and "-r" in flags)
    )


def _tree_of(path: str) -> str | None:
    """The pattern of every file below ``path`` when it is a directory named from the
    root or the home (a relative one is the working directory's: judged by its name)."""
    text = str(path)
    if not text.startswith(("/", "~")):
        return None
    base = text.rstrip("/")
    return PathPattern((base if type(path) is PathPattern else escape(base)) + "/*")


def _tree(root: Word) -> Word:
    """The files below a root find walks, as a word: ``/etc`` → ``/etc/*``; a relative
    root → a relative pattern (it cannot be absolute)."""
    text = root.text.rstrip("/") if root.exact else ""
    if root.exact and text.startswith(("/", "~")):
        return Word(text + "/*", escape(text) + "/*", False, True)
    if root.exact:
        prefix = "" if text in ("", ".") else escape(text.removeprefix("./")) + "/"
        return Word(prefix + "x", prefix + "[!/]*", False, True)
    return Word(root.text, "*", False, True)


def _literal_url(text: str) -> bool:
    """Whether a URL word with glob characters is still one URL: its host reads as a
    host (an IPv6 literal's brackets), not a range or a pattern (``127.0.0.[1-2]``)."""
    from interlock.facts.url import UrlError, url_facts

    try:
        found = url_facts(text)
    except UrlError:
        return False
    return not any(ch in found.host for ch in "*?[]{}")


def _tail(word: Word, skip: int) -> Word:
    """The word without its first ``skip`` characters (``@file`` → ``file``)."""
    if word.exact:
        rest = word.text[skip:]
        return Word(rest, escape(rest), True, False)
    return Word(word.text[skip:], "*", False, word.magic)


def _find_expression(word: Word) -> bool:
    if not word.static:
        return False
    return word.text.startswith("-") or word.text in ("(", ")", "!", ",", "\\(", "\\)")


def _fed_text(node: Node, walker: Walker) -> str | None:
    """The heredoc or here-string fed to the command at ``node``, if static."""
    parents = [node]
    if node.parent is not None and node.parent.type == "redirected_statement":
        parents.append(node.parent)
    for holder in parents:
        for child in holder.children:
            if child.type == "heredoc_redirect":
                for part in child.children:
                    if part.type == "heredoc_body":
                        return node_text(part)
                return ""
            if child.type == "herestring_redirect":
                for part in child.named_children:
                    word = walker.word(part)
                    return word.text if word.static else None
    return None
