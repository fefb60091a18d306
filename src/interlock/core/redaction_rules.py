"""The built-in secret shapes: one table of rules, compiled into one regex.

Each rule finds one kind of secret and names it (the ``kind`` in the
``[REDACTED:<kind>]`` marker that replaces it). Two families:

- **shapes** — a token whose form alone says what it is (``sk_live_…``, ``glpat-…``,
  ``AKIA…``, a JWT, a PEM private key): replaced wherever it appears;
- **slots** — a value a label announces (``password=…``, ``Authorization: Bearer …``,
  ``--password …``, ``sshpass -p …``, ``<password>…</password>``): only the value is
  replaced, and only one word of it (see :mod:`interlock.core.redaction_slots` for a
  value that is a word of its own).

What a rule may replace never holds whitespace, a quote, a backslash or a shell
operator (``; & | < > ( ) ` $( ${``): a redaction cannot swallow the rest of a command.
The one exception is a PEM private key with its BEGIN and END lines, whose body is
base64 lines.

All patterns are linear-time: every repetition is possessive, bounded, or followed by
something it cannot match. A rule is ``first`` (a one-character class) followed by
``rest``; ``rest`` has one group named ``s``, the secret. The combined regex starts
with the class of all first characters, which the engine scans for without trying
every rule at every position; word-boundary checks are therefore written after the
first character, as ``(?<!X.)``. ``triggers`` are lowercase literals one of which
occurs in every match: text with none of them skips the regex altogether. They are
chosen to start with few distinct characters (``pm_``, not ``npm_``): the scan for
them skips every position whose character starts none.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "KINDS",
    "RULES",
    "TRIGGER_RE",
    "Rule",
    "combined_for",
    "key_kind",
    "marker",
    "shape_kind",
]


@dataclass(frozen=True, slots=True)
class Rule:
    """One built-in secret shape (see the module docstring)."""

    name: str
    kind: str  # the marker's kind; "" when it is read from the key (key_kind)
    first: str
    rest: str
    triggers: tuple[str, ...]
    keep_prefix: bool = True  # keep the matched text before the secret (the label)
    rescan_prefix: bool = False  # redact that kept text too (it may hold a token)
    slot: bool = False  # the secret may be a word of its own: check it is an argument
    shape: bool = False  # the match is the whole secret (used to name a slot's value)
    also: tuple[str, ...] = ()  # lowercase literals one of which must occur too


# -- building blocks -------------------------------------------------------------------

# An optional quote, possibly backslash-escaped (JSON inside a JSON string).
_OPT_QUOTE = r"""(?:\\?["'])?"""
# A value never starts a PEM block: the PEM rule must see the BEGIN line.
_NOT_PEM = r"(?!-----BEGIN )"
_SEP = rf"{_OPT_QUOTE}[ \t]{{0,8}}[:=][ \t]{{0,8}}{_OPT_QUOTE}"
_HEADER_SEP = rf"{_OPT_QUOTE}[ \t]{{0,8}}:[ \t]{{0,8}}{_OPT_QUOTE}"
# One word of a value: no whitespace, quote, backslash, shell operator, bracket or
# comma; a '$' only where it starts no command or parameter expansion; and never a
# bare reference ("$TOKEN" names a secret, it does not hold one) or a marker.
_VALUE_CHAR = r"""[^\s"'\\;&|<>()`$,\[\]{}]"""
_VALUE = rf"""(?![$\[])(?:{_VALUE_CHAR}++|\$(?![({{\['"]))++"""
_NAME_END = r"(?![A-Za-z0-9_-])"
_PEM_LABEL = r"(?:[A-Z0-9]+ ){0,3}PRIVATE KEY(?: BLOCK)?"
_PEM_SEP = r"(?:\r?\n|(?:\\r)?\\n|[ \t]{1,4})"
_PEM_HEADER = r"(?:Proc-Type|DEK-Info):[ \t]?[A-Za-z0-9,\-]{1,80}+"
_AUTH_SCHEMES = (
    r"(?i:bearer|basic|token|negotiate|ntlm|oauth|apikey|api-key|key|jwt|dpop|sso-key|ssws"
    r"|splunk|googlelogin|sharedkeylite|sharedkey|hmac|mac|vapid|paseto|client-id|bot|hoba"
    r"|mutual|scram-sha-1|scram-sha-256)"
)
_COOKIE_NAME = r"[A-Za-z0-9_.%!#*+^~-]{1,128}+"
_COOKIE_PAIR = rf";[ \t]{{0,8}}{_COOKIE_NAME}={_VALUE}"
_FLAG_NAMES = (
    r"(?:password|passwd|passphrase|pass|token|api-key|apikey|access-token|auth-token"
    r"|client-secret|secret-key|access-key|storepass|keypass|srcstorepass|deststorepass"
    r"|srckeypass|destkeypass)"
)
# The rest of a simple command after a program name, up to one of its options.
_SAME_COMMAND = r"(?:[^\n;&|`()]{0,256}?[ \t])"


def _words(names: tuple[str, ...]) -> tuple[str, str]:
    """``(first, rest)`` matching any of ``names`` as a whole word (a path may lead)."""
    firsts = sorted({name[0] for name in names})
    branches = "|".join(
        f"(?<={re.escape(name[0])}){re.escape(name[1:])}"
        for name in sorted(names, key=len, reverse=True)
    )
    first = firsts[0] if len(firsts) == 1 else "[" + "".join(map(re.escape, firsts)) + "]"
    return first, rf"(?<![A-Za-z0-9_.\-].)(?:{branches})(?![A-Za-z0-9_.\-])"


def _tool(
    name: str,
    tools: tuple[str, ...],
    option: str,
    triggers: tuple[str, ...],
    *,
    after: str = "",
    login: bool = False,
) -> Rule:
    """A password given to a known program with a short option (``sshpass -p x``).
    The triggers are the option (``-p``; ``-a `` where a word like ``user-agent`` would
    wake it for nothing): a dash is rarer than the programs' letters, so text without
    one is passed over quickly; the program's name is checked after."""
    first, program = _words(tools)
    then = r"[ \t]+login(?![A-Za-z0-9_-])" if login else ""
    rest = rf"{program}{then}{_SAME_COMMAND}{option}{after}(?P<s>(?!-){_VALUE})"
    names = tuple(sorted({tool.lower() for tool in tools}))
    return Rule(name, "password", first, rest, triggers, slot=True, also=names)


_MYSQL = (
    "mysql",
    "mysqldump",
    "mysqladmin",
    "mysqlimport",
    "mysqlcheck",
    "mysqlshow",
    "mysqlslap",
    "mariadb",
    "mariadb-dump",
    "mariadb-admin",
)
_MONGO = ("mongo", "mongosh", "mongodump", "mongorestore", "mongoexport", "mongoimport")
_LDAP = (
    "ldapsearch",
    "ldapadd",
    "ldapmodify",
    "ldapdelete",
    "ldapwhoami",
    "ldappasswd",
    "ldapcompare",
    "ldapmodrdn",
    "ldapexop",
)

RULES: Final[tuple[Rule, ...]] = (
    # -- PEM private keys: BEGIN line, base64 lines, END line -------------------------------
    Rule(
        "pem_private_key",
        "private-key",
        "-",
        rf"----BEGIN {_PEM_LABEL}-----"
        rf"(?P<s>(?:{_PEM_SEP}(?:{_PEM_HEADER}|[A-Za-z0-9+/=]{{1,128}}+))++{_PEM_SEP})"
        rf"-----END {_PEM_LABEL}-----",
        ("private key",),
    ),
    Rule(
        # A key cut short (no END line): the full-width lines that follow BEGIN.
        "pem_private_key_cut",
        "private-key",
        "-",
        rf"----BEGIN {_PEM_LABEL}-----"
        rf"(?P<s>(?:{_PEM_SEP}(?:{_PEM_HEADER}|[A-Za-z0-9+/=]{{40,128}}+))++)",
        ("private key",),
    ),
    # -- slots: a label, then one word of value ------------------------------------------------
    Rule(
        # Authorization / Proxy-Authorization: the credential after the scheme. Digest
        # and AWS4 carry parameters; their signature rule below takes the secret one.
        "authorization_header",
        "authorization",
        "[aA]",
        rf"(?<![A-Za-z0-9_].)(?i:uthorization){_NAME_END}{_HEADER_SEP}"
        rf"(?:{_AUTH_SCHEMES}[ \t]+|(?!{_AUTH_SCHEMES}{_NAME_END}))"
        rf"(?!(?i:digest|aws4-hmac-sha256){_NAME_END})"
        rf"(?P<s>{_NOT_PEM}{_VALUE})",
        ("authorization",),
        slot=True,
    ),
    Rule(
        # Cookie / Set-Cookie: the first value; the pairs after it are looked at by the
        # redactor (every value inside quotes, opaque ones elsewhere).
        "cookie_header",
        "cookie",
        "[cC]",
        rf"(?<![A-Za-z0-9_].)(?i:ookie){_NAME_END}{_HEADER_SEP}"
        rf"(?:{_COOKIE_NAME}=)?(?P<s>{_VALUE})(?!\[)(?:{_COOKIE_PAIR})*+",
        ("cookie",),
        slot=True,
    ),
    Rule(
        # HTTP Digest's response= and AWS Signature V4's Signature= (header or query).
        "auth_signature",
        "signature",
        "[rRsS]",
        r"(?<![A-Za-z0-9_].)(?:(?<=[rR])(?i:esponse)|(?<=[sS])(?i:ignature))=(?:\\?\")?"
        r"(?P<s>[0-9a-fA-F]{32,128}+)(?![0-9A-Za-z])",
        ("esponse=", "signature="),
    ),
    Rule(
        # password=..., "token": "...", ?access_token=...&x=1, PGPASSWORD=..., any key
        # ending in password, passwd, passphrase, pass, pwd, secret, token, api key,
        # access key, private key or authorization. The kind is read from the key.
        "key_value",
        "",
        "[pPsStTaA]",
        r"(?:(?<=[pP])(?i:assw(?:or)?d|assphrase|wd|rivate[_-]?key)"
        r"|(?<=[pP])(?<![A-Za-z0-9].)(?i:ass)"
        r"|(?<=[sS])(?i:ecret)|(?<=[tT])(?i:oken)"
        r"|(?<=[aA])(?i:pi[_-]?key|ccess[_-]?key|uthorization))"
        rf"{_SEP}(?P<s>{_NOT_PEM}(?!(?:{_AUTH_SCHEMES}|(?i:digest|aws4-hmac-sha256))[ \t])"
        rf"{_VALUE})",
        ("pass", "pwd", "secret", "token", "key", "authorization"),
        slot=True,
    ),
    Rule(
        # <password>...</password>, <apiKey>...</apiKey>, <db:secret>...</db:secret>
        "xml_element",
        "",
        "<",
        r"(?:[A-Za-z][\w.-]{0,40}:)?[\w.-]{0,40}?"
        r"(?i:password|passwd|passphrase|secret|token|api[_-]?key|access[_-]?key"
        r"|secret[_-]?key|private[_-]?key)>"
        rf"(?P<s>{_VALUE})(?=</)",
        ("pass", "secret", "token", "key"),
    ),
    Rule(
        # openssl's -passin / -passout / -pass pass:<password>
        "openssl_pass",
        "password",
        "-",
        rf"(?<![A-Za-z0-9_\-].)pass(?:in|out)?[ \t]+pass:(?P<s>{_VALUE})",
        ("pass",),
        slot=True,
    ),
    Rule(
        # --password x, --db-password x, -storepass x, --api-key x, --token x
        "flag_value",
        "",
        "-",
        r"(?<![A-Za-z0-9_\-].)-?(?!(?:no|ask|prompt|with)-)(?:[a-z0-9]++-){0,3}"
        rf"{_FLAG_NAMES}{_NAME_END}[ \t]++(?P<s>(?!-){_VALUE})",
        ("pass", "token", "key", "secret"),
        slot=True,
    ),
    _tool("sshpass", ("sshpass",), r"-p[ \t]*+", ("-p",)),
    _tool("mysql", _MYSQL, "-p", ("-p",)),
    _tool("mongo", _MONGO, r"-p[ \t]++", ("-p",)),
    _tool("redis_cli", ("redis-cli",), r"-a[ \t]++", ("-a ", "-a\t")),
    _tool("sqlcmd", ("sqlcmd", "bcp"), r"-P[ \t]*+", ("-p",)),
    _tool("zip", ("zip", "unzip", "zipcloak"), r"-P[ \t]++", ("-p",)),
    _tool("7z", ("7z", "7za", "7zr"), "-p", ("-p",)),
    _tool("ldap", _LDAP, r"-w[ \t]++", ("-w ", "-w\t")),
    _tool(
        "smb",
        ("smbclient", "rpcclient", "smbget", "smbcacls"),
        r"(?:-U[ \t]*+|--user=)",
        ("-u",),
        after=r"[^\s%:'\"\\;&|<>()`$]{0,128}+%",
    ),
    _tool(
        "curl",
        ("curl",),
        r"(?:-u|--user|-U|--proxy-user)(?:[ \t]++|=)?",
        ("-u",),
        after=r"[^\s:'\"\\;&|<>()`$]{0,128}+:",
    ),
    _tool(
        "registry_login",
        ("docker", "podman", "nerdctl", "buildah"),
        r"-p[ \t]++",
        ("-p",),
        login=True,
    ),
    Rule(
        # scheme://user:password@host -- the password, up to the last '@'. The match
        # starts at "://" (the scheme stays outside it, untouched).
        "url_credentials",
        "url-password",
        ":",
        r"(?<=[A-Za-z0-9+.\-]:)//[^\s:/?#@\"'<>]{0,256}:"
        r"(?P<s>[^\s/?#\"'<>;&|`()\\,\[\]{}]+)@",
        ("@",),
        rescan_prefix=True,  # the kept user name may itself be a token
    ),
    Rule(
        # RFC 6750 b64token, 8+ chars, not all lowercase after its first character
        # (so "Bearer authentication failed" is left alone).
        "bearer_token",
        "bearer-token",
        "[bB]",
        r"(?<![A-Za-z0-9_\-].)(?i:earer)[ \t]++"
        r"(?P<s>(?=[A-Za-z0-9._~+/\-][a-z]*+[A-Z0-9._~+/=\-])[A-Za-z0-9._~+/\-]{8,}+=*+)",
        ("bearer",),
        slot=True,
    ),
    Rule(
        # `aws configure set aws_secret_access_key <key>`: the key word, a space, 40 chars.
        "aws_secret_argument",
        "aws-secret-key",
        "[aA]",
        r"(?<![A-Za-z0-9_].)(?i:ws_?secret_?access_?key)[ \t]++"
        r"(?P<s>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
        ("secret",),
        slot=True,
    ),
    # -- shapes: the token says what it is; the whole token is replaced ----------------------
    Rule(
        "aws_access_key_id",
        "aws-access-key-id",
        "A",
        r"(?<![A-Za-z0-9].)(?P<s>(?:KIA|SIA)[A-Z0-9]{16})(?![A-Za-z0-9])",
        ("akia", "asia"),
        keep_prefix=False,
        shape=True,
    ),
    Rule(
        "anthropic_key",
        "anthropic-key",
        "s",
        r"(?<![A-Za-z0-9_\-].)(?P<s>k-ant-[A-Za-z0-9_\-]{20,}+)",
        ("sk-ant-",),
        keep_prefix=False,
        shape=True,
    ),
    Rule(
        "openai_key",
        "openai-key",
        "s",
        r"(?<![A-Za-z0-9_\-].)(?P<s>k-(?:(?:proj|svcacct|admin)-)?[A-Za-z0-9_\-]{20,}+)",
        ("sk-",),
        keep_prefix=False,
        shape=True,
    ),
    Rule(
        # Stripe secret (sk_live_, sk_test_), restricted (rk_) and webhook (whsec_) keys.
        "stripe_key",
        "stripe-key",
        "[rsw]",
        r"(?<![A-Za-z0-9_].)"
        r"(?P<s>(?:(?<=[rs])k_(?:live|test)_[A-Za-z0-9]{16,}+|(?<=w)hsec_[A-Za-z0-9]{32,}+))",
        ("k_live_", "k_test_", "hsec_"),
        keep_prefix=False,
        shape=True,
    ),
    Rule(
        "github_token",
        "github-token",
        "g",
        r"(?<![A-Za-z0-9_].)"
        r"(?P<s>(?:h[pousr]_[A-Za-z0-9]{36,}+|ithub_pat_[A-Za-z0-9_]{22,}+))",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        keep_prefix=False,
        shape=True,
    ),
    Rule(
        "gitlab_token",
        "gitlab-token",
        "g",
        r"(?<![A-Za-z0-9_].)"
        r"(?P<s>l(?:pat|dt|rt|ptt|ft|soat|cbt|imt|oas|agent)-[A-Za-z0-9_\-]{20,}+)",
        (
            "glpat-",
            "gldt-",
            "glrt-",
            "glptt-",
            "glft-",
            "glsoat-",
            "glcbt-",
            "glimt-",
            "gloas-",
            "glagent-",
        ),
        keep_prefix=False,
        shape=True,
    ),
    Rule(
        "huggingface_token",
        "huggingface-token",
        "h",
        r"(?<![A-Za-z0-9_].)(?P<s>f_[A-Za-z0-9]{30,}+)(?![A-Za-z0-9_])",
        ("hf_",),
        keep_prefix=False,
        shape=True,
    ),
    Rule(
        "sendgrid_key",
        "sendgrid-key",
        "S",
        r"(?<![A-Za-z0-9_].)(?P<s>G\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43})(?![A-Za-z0-9_\-])",
        ("sg.",),
        keep_prefix=False,
        shape=True,
    ),
    Rule(
        "npm_token",
        "npm-token",
        "n",
        r"(?<![A-Za-z0-9_].)(?P<s>pm_[A-Za-z0-9]{36})(?![A-Za-z0-9])",
        ("pm_",),
        keep_prefix=False,
        shape=True,
    ),
    Rule(
        "slack_token",
        "slack-token",
        "x",
        r"(?<![A-Za-z0-9_\-].)(?P<s>(?:ox[abprse]|app)-[A-Za-z0-9\-]{10,}+)",
        ("xox", "xapp-"),
        keep_prefix=False,
        shape=True,
    ),
    Rule(
        # The secret path segment of an incoming-webhook URL (the host stays visible).
        "slack_webhook",
        "slack-webhook",
        "h",
        r"(?<![A-Za-z0-9_.\-].)ooks\.slack\.com/services/[A-Za-z0-9]{1,32}+/[A-Za-z0-9]{1,32}+/"
        r"(?P<s>[A-Za-z0-9]{16,}+)",
        ("hooks.slack.com",),
    ),
    Rule(
        "google_api_key",
        "google-api-key",
        "A",
        r"(?<![A-Za-z0-9_\-].)(?P<s>Iza[A-Za-z0-9_\-]{35,}+)",
        ("aiza",),
        keep_prefix=False,
        shape=True,
    ),
    Rule(
        "shopify_token",
        "shopify-token",
        "s",
        r"(?<![A-Za-z0-9_].)(?P<s>hp(?:at|ss|ca|pa)_[a-fA-F0-9]{32,}+)",
        ("shpat_", "shpss_", "shpca_", "shppa_"),
        keep_prefix=False,
        shape=True,
    ),
    Rule(
        "vault_token",
        "vault-token",
        "h",
        r"(?<![A-Za-z0-9_.].)(?P<s>v[sbr]\.[A-Za-z0-9_\-]{24,}+)",
        ("hvs.", "hvb.", "hvr."),
        keep_prefix=False,
        shape=True,
    ),
    Rule(
        # header.payload.signature (the signature may be empty; JWE's five parts too).
        "jwt",
        "jwt",
        "e",
        r"(?<![A-Za-z0-9_\-].)(?P<s>yJ[A-Za-z0-9_\-]++\.[A-Za-z0-9_\-]++\.[A-Za-z0-9_\-]*+"
        r"(?:\.[A-Za-z0-9_\-]++){0,2})",
        ("eyj",),
        keep_prefix=False,
        shape=True,
    ),
)

#: Every kind a built-in rule can name (a policy pattern's is ``policy``; a value under
#: a key that names a secret is the plain ``[REDACTED]``).
KINDS: Final[tuple[str, ...]] = tuple(
    sorted(
        {rule.kind for rule in RULES if rule.kind}
        | {"password", "secret", "token", "api-key", "access-key", "aws-secret-key"}
        | {"private-key", "authorization"}
    )
)


def _chars(first: str) -> str:
    """The characters of a rule's ``first``: one literal, or a simple ``[...]`` class."""
    return first[1:-1] if first.startswith("[") else first


def _combine(indices: tuple[int, ...]) -> re.Pattern[str]:
    """``[all first chars](?:(?<=first_0)rest_0|...)`` of the rules at ``indices`` (in
    table order); rule i's group becomes ``s{i}``."""
    firsts = "".join(sorted({c for i in indices for c in _chars(RULES[i].first)}))
    branches = [
        f"(?<={RULES[i].first}){RULES[i].rest.replace('(?P<s>', f'(?P<s{i}>', 1)}" for i in indices
    ]
    return re.compile(f"[{re.escape(firsts)}](?:{'|'.join(branches)})", re.ASCII)


def _trie(words: set[str]) -> str:
    """One regex for ``words`` as a prefix tree (``a(?:iza|kia)|b…``): the engine
    tries one branch per first character instead of every word at every position,
    and a word another one starts with is dropped (finding the shorter suffices)."""
    tree: dict[str, dict[str, Any]] = {}
    for word in words:
        node = tree
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def emit(node: dict[str, Any]) -> str:
        if "" in node:
            return ""
        branches = [re.escape(char) + emit(child) for char, child in sorted(node.items())]
        return branches[0] if len(branches) == 1 else f"(?:{'|'.join(branches)})"

    return emit(tree)


TRIGGER_RE: Final = re.compile(_trie({t for rule in RULES for t in rule.triggers}))
# The rules a found trigger may start (a found trigger is one no other one starts).
_RULES_OF: Final[dict[str, frozenset[int]]] = {}
for _i, _rule in enumerate(RULES):
    for _trigger in _rule.triggers:
        for _found in {t for r in RULES for t in r.triggers}:
            if _trigger.startswith(_found):
                _RULES_OF[_found] = _RULES_OF.get(_found, frozenset()) | {_i}


_ALSO: Final = tuple(frozenset(rule.also) for rule in RULES)
_ALSO_RE: Final = re.compile(_trie({name for rule in RULES for name in rule.also}))


def combined_for(lowered: str) -> re.Pattern[str] | None:
    """The combined regex of the rules that can match in a text whose lowercase form
    is ``lowered`` (only rules one of whose triggers it holds), or ``None`` when no
    rule can. Gives what all the rules combined give, faster: most texts wake a rule or
    two, and the regex of each set of rules is compiled once, when first needed."""
    hit = TRIGGER_RE.search(lowered)  # the usual text has none: one quick scan
    if hit is None:
        return None
    found: set[str] = set()
    while hit is not None:  # every hit, overlapping ones too ("ldappasswd=": "pass")
        found.add(hit.group(0))
        hit = TRIGGER_RE.search(lowered, hit.start() + 1)
    triggers = frozenset(found)
    if not _NEEDS_NAMES[triggers]:
        return _pattern_for(triggers, frozenset())
    # A program's option ("-p") is common: its rule runs only if the program is named.
    return _pattern_for(triggers, frozenset(hit.group(0) for hit in _ALSO_RE.finditer(lowered)))


class _NeedsNames(dict[frozenset[str], bool]):
    """Whether any rule the triggers wake also needs a program's name (memoised)."""

    def __missing__(self, triggers: frozenset[str]) -> bool:
        needs = any(_ALSO[i] for trigger in triggers for i in _RULES_OF[trigger])
        if len(self) < 4096:
            self[triggers] = needs
        return needs


_NEEDS_NAMES: Final = _NeedsNames()


@functools.lru_cache(maxsize=512)
def _pattern_for(triggers: frozenset[str], named: frozenset[str]) -> re.Pattern[str] | None:
    """The combined regex of the rules ``triggers`` wake whose program, if they need
    one, is among ``named``."""
    indices = {
        i for trigger in triggers for i in _RULES_OF[trigger] if not _ALSO[i] or _ALSO[i] & named
    }
    return _combined(tuple(sorted(indices))) if indices else None


@functools.lru_cache(maxsize=256)
def _combined(indices: tuple[int, ...]) -> re.Pattern[str]:
    return _combine(indices)


# Per first character, the shapes a whole value may be (to name a slot's value).
_SHAPE_RULES_BY_FIRST: Final[dict[str, tuple[Rule, ...]]] = {}
for _rule in RULES:
    if _rule.shape:
        for _char in _chars(_rule.first):
            _SHAPE_RULES_BY_FIRST[_char] = (*_SHAPE_RULES_BY_FIRST.get(_char, ()), _rule)


@functools.lru_cache(maxsize=64)
def _shapes_starting(char: str) -> tuple[tuple[re.Pattern[str], str], ...]:
    """The whole-value regexes (and kinds) of the shapes that start with ``char``,
    compiled when first needed."""
    return tuple(
        (re.compile(f"{rule.first}{rule.rest.replace('(?P<s>', '(?:', 1)}", re.ASCII), rule.kind)
        for rule in _SHAPE_RULES_BY_FIRST.get(char, ())
    )


_MARKERS: dict[str, str] = {}


def marker(kind: str) -> str:
    """``[REDACTED:<kind>]``."""
    text = _MARKERS.get(kind)
    if text is None:
        text = _MARKERS.setdefault(kind, f"[REDACTED:{kind}]")
    return text


def shape_kind(value: str) -> str | None:
    """The kind of ``value`` when it is, whole, a token of a known shape."""
    if value[:1] not in _SHAPE_RULES_BY_FIRST:
        return None
    for whole, kind in _shapes_starting(value[:1]):
        if whole.fullmatch(value):
            return kind
    return None


def key_kind(key: str, value: str = "") -> str | None:
    """The kind of secret a key or flag names (``DB_PASSWORD`` → ``password``); ``None``
    where it only looks like one (``PWD=/home/bob``: the shell's working directory)."""
    name = key.lower().lstrip("-")
    if name in ("pwd", "oldpwd") and value.startswith(("/", "~")):
        return None
    if "pass" in name or "pwd" in name:
        return "password"
    if "secret" in name and ("access" in name or "aws" in name):
        return "aws-secret-key"
    if "private" in name:
        return "private-key"
    for word, kind in (
        ("secret", "secret"),
        ("token", "token"),
        ("authorization", "authorization"),
        ("api", "api-key"),
        ("access", "access-key"),
    ):
        if word in name:
            return kind
    return "secret"
