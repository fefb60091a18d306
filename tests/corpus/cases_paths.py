"""Path rows: a file tool reading a secret or a file outside /workspace, however the
path is spelled, and however many paths the call names."""

from __future__ import annotations

from typing import Final

from .case import (
    ALIASES,
    DENY,
    NO_SECRETS,
    UNDETERMINED,
    UNJUDGEABLE,
    WORKSPACE,
    Case,
    table,
)

__all__ = ["PATHS"]

SECRET: Final = DENY("files-no-secrets")
CONFLICT: Final = DENY("interlock:conflicting-aliases")

SPELLINGS = table(
    "path:spellings",
    [
        ("path-etc", "/etc/passwd"),
        ("path-traversal", "/workspace/../etc/passwd"),
        ("path-traversal-deep", "/workspace/a/b/../../../etc/shadow"),
        ("path-traversal-past-root", "/workspace/../../../../etc/shadow"),
        ("path-traversal-dot", "/workspace/./../etc/passwd"),
        ("path-double-slash", "//etc/passwd"),
        ("path-double-slash-inner", "/etc//passwd"),
        ("path-dot-segment", "/./etc/passwd"),
        ("path-trailing-slash", "/etc/passwd/"),
        ("path-trailing-dot", "/etc/passwd/."),
        ("path-tilde-inside", "/workspace/~/../../etc/passwd"),
        ("path-upper-dir", "/ETC/passwd"),
        ("path-ssh-home", "~/.ssh/id_rsa"),
        ("path-ssh-home-var", "$HOME/.ssh/id_rsa"),
        ("path-ssh-home-braced", "${HOME}/.ssh/id_ed25519"),
        ("path-ssh-root", "/root/.ssh/id_rsa"),
        ("path-ssh-other-user", "~alice/.ssh/id_rsa"),
        ("path-ssh-in-workspace", "/workspace/.ssh/id_rsa"),
        ("path-ssh-climb", "/workspace/../root/.ssh/authorized_keys"),
        ("path-dotenv", "/workspace/.env"),
        ("path-dotenv-upper", "/workspace/.ENV"),
        ("path-dotenv-mixed", "/workspace/app/.Env"),
        ("path-dotenv-relative", ".env"),
        ("path-dotenv-dot", "./.env"),
        ("path-dotenv-trailing-slash", "/workspace/.env/"),
        ("path-pem", "/workspace/certs/key.pem"),
        ("path-pem-upper", "/workspace/certs/KEY.PEM"),
        ("path-pem-climb", "/workspace/a/../key.pem"),
    ],
    intent=NO_SECRETS,
    expect=SECRET,
    tool="read_file",
    key="path",
) + table(
    "path:spellings",
    [
        ("path-relative-climb", "../../etc/passwd"),
        ("path-workspace-relative-climb", "workspace/../../etc/passwd"),
        ("path-variable-climb", "/workspace/$X/../../etc/passwd"),
        ("path-windows-variable", "%USERPROFILE%/.ssh/id_rsa"),
        ("path-variable-dir", "$DIR/key.pem"),
        ("path-outside", "/home/alice/notes.txt"),
        ("path-workspace-itself", "/workspace"),
        ("path-workspace-prefix", "/workspace2/a.txt"),
        ("path-workspace-case", "/Workspace/a.txt"),
        ("path-proc-environ", "/proc/self/environ"),
        ("path-empty", ""),
        ("path-file-url", "file:///etc/passwd"),
    ],
    intent=WORKSPACE,
    tool="read_file",
    key="path",
)

NUL = table(
    "path:nul",
    [
        ("path-nul-traversal", "/workspace/a\x00/../../etc/passwd"),
        ("path-nul-end", "/workspace/x.txt\x00"),
        ("path-nul-secret", "/etc/passwd\x00.txt"),
    ],
    intent=UNJUDGEABLE,
    expect=UNDETERMINED,
    tool="read_file",
    key="path",
)


def _list(
    case_id: str, tool: str, key: str, values: list[str]
) -> tuple[str, list[str], dict[str, object]]:
    return (case_id, values, {"tool": tool, "args": {key: values}})


LISTS = table(
    "path:lists",
    [
        _list("path-list-etc", "read_file_list", "path", ["/workspace/a.txt", "/etc/passwd"]),
        _list(
            "path-list-dotenv", "read_file_list", "path", ["/workspace/a.txt", "/workspace/.env"]
        ),
        _list(
            "path-list-traversal",
            "read_files",
            "paths",
            ["/workspace/a.txt", "/workspace/../etc/shadow"],
        ),
        _list("path-list-ssh", "read_files", "paths", ["/workspace/a.txt", "~/.ssh/id_rsa"]),
        _list("path-list-first", "read_files", "paths", ["/etc/passwd", "/workspace/a.txt"]),
        _list(
            "path-list-file-paths",
            "read_file_paths",
            "file_paths",
            ["/workspace/a.txt", "/root/.ssh/id_rsa"],
        ),
        _list(
            "path-list-long",
            "read_files",
            "paths",
            [f"/workspace/f{i}.txt" for i in range(100)] + ["/etc/shadow"],
        ),
    ],
    intent=NO_SECRETS,
    expect=SECRET,
    tool="read_files",
    key="paths",
) + table(
    "path:lists",
    [
        _list("path-list-outside", "read_files", "paths", ["/workspace/a.txt", "/home/alice/x"]),
        _list("path-list-nul", "read_files", "paths", ["/workspace/a.txt", "/workspace/b\x00"]),
        _list("path-list-empty-item", "read_files", "paths", ["/workspace/a.txt", ""]),
        _list(
            "path-list-too-many",
            "read_files",
            "paths",
            [f"/workspace/f{i}.txt" for i in range(300)],
        ),
    ],
    intent=WORKSPACE,
    tool="read_files",
    key="paths",
)


def _two(
    case_id: str, tool: str, other: str, first: str, second: object
) -> tuple[str, str, dict[str, object]]:
    return (case_id, first, {"tool": tool, "args": {"path": first, other: second}})


CONFLICTS = table(
    "path:aliases",
    [
        _two(
            "path-alias-file-path",
            "read_file_aliases",
            "file_path",
            "/workspace/a.txt",
            "/etc/passwd",
        ),
        _two(
            "path-alias-file-path-reversed",
            "read_file_aliases",
            "file_path",
            "/etc/passwd",
            "/workspace/a.txt",
        ),
        _two(
            "path-alias-file-path-dotenv",
            "read_file_aliases",
            "file_path",
            "/workspace/a.txt",
            "/workspace/.env",
        ),
    ],
    intent=ALIASES,
    expect=CONFLICT,
    tool="read_file_aliases",
    key="path",
) + table(
    "path:aliases",
    [
        _two(
            "path-alias-filename",
            "read_file_filename",
            "filename",
            "/workspace/a.txt",
            "/etc/passwd",
        ),
        _two(
            "path-alias-filepath",
            "read_file_filepath",
            "filepath",
            "/workspace/a.txt",
            "~/.ssh/id_rsa",
        ),
        _two(
            "path-alias-paths", "read_file_and_paths", "paths", "/workspace/a.txt", ["/etc/shadow"]
        ),
    ],
    intent=NO_SECRETS,
    expect=SECRET,
    tool="read_file_filename",
    key="path",
)

PATHS: Final[list[Case]] = [*SPELLINGS, *NUL, *LISTS, *CONFLICTS]
