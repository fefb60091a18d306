"""Benchmark ``session``: what session-aware rules cost, beside the plain check in the
same run.

Subjects (one run, interleaved rounds, the best round of each kept):

* **baseline: stateless check** — ``guard.check`` under per-call rules only (the
  agent's tools allowed, raw sockets and internal addresses refused, transfers capped);
* **session rules, in process** — the same rules plus labels, data flows
  (``flows_from``) and argument provenance, a :class:`MemoryHistory`: each check reads
  its session's view, tests the flows and provenance of its arguments against every
  executed step's fingerprints, and appends its step. Sessions are pre-filled as an
  agent task leaves them — the user's request, a fetched page, a mail, a secret read,
  file reads, each with its result's fingerprints — to :data:`TYPICAL_STEPS` steps, and
  to :data:`FULL_STEPS` (the default ``max_steps``) for the worst case. The history
  keeps :data:`CHECKS_PER_SESSION` steps more than that (:data:`BENCH_MAX_STEPS`), and
  a subject's sessions are pre-filled and timed a batch at a time (:func:`_batch`):
  no timed session drops a step or is demoted — a session whose data-bringing steps
  left the history has its flows and provenance undetermined, so its checks would time
  a "cannot tell" (and a demotion an eviction), not the rules (the bench says so as a
  correctness problem, with each subject's verdicts in its notes: ``census``);
* each of these with three kinds of **argument values** (:data:`ARGUMENTS`), the
  baseline with the same: ``repeated`` — eight calls whose values recur (an agent
  mails the same recipient, fetches the same URL: the argument probes come from the
  cache of values seen before); ``new`` — every value new (a probe computed for each
  argument of every check); ``mix`` — every other check new. The target is judged on
  the mix; ``new`` is the worst case an argument's probe can make;
* **durable path** — both policies again with a SQLite store (default durability):
  the baseline is the plain check with that store, the subject keeps its history in
  the store when the store offers one (``store.session_history``), else in memory
  (said in the notes).

Also: the fingerprints of a tool result (``of_data``) and of an argument (``probe``)
per KB, and the memory one session's history holds after :data:`FULL_STEPS` steps
(``tracemalloc``).

Targets: session rules ≤ 2× the stateless check in process (the ``mix`` subjects),
≤ 1.2× on the durable path (p50 ratios, same run; each ratio against the baseline with
the same kind of argument values).
"""

from __future__ import annotations

import gc
import random
import string
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

from bench.harness import BenchResult, Stats, Target, summarise, time_calls
from interlock import Action, Context, Guard, load_policy_text
from interlock.core.events import MemorySink
from interlock.session.fingerprints import of_data, probe
from interlock.session.history import MAX_FINGERPRINTS, MemoryHistory, NewStep, SessionHistory
from interlock.session.tails import tails_of

try:  # absent in a tree before the chains of pieces (ADR 0044)
    from interlock.session.pieces import Pieces
except ImportError:  # pragma: no cover - an A/B run against an older tree
    Pieces = None  # type: ignore[assignment,misc]

__all__ = ["DEFAULT_CALLS", "FLOWS", "LABELS", "PER_CALL", "run"]

_T = TypeVar("_T")

DEFAULT_CALLS: Final = 20_000
QUICK_CALLS: Final = 2_000
ROUNDS: Final = 3
TYPICAL_STEPS: Final = 20
FULL_STEPS: Final = 200
#: each session takes this many timed checks (so it stays near its pre-filled size)
CHECKS_PER_SESSION: Final = 10
#: the in-memory subjects' ``max_steps``: a :data:`FULL_STEPS` session's timed checks
#: drop none of its steps (one whose oldest data-bringing steps left cannot have its
#: flows told: undetermined, not what a 200-step session's rules cost)
BENCH_MAX_STEPS: Final = FULL_STEPS + CHECKS_PER_SESSION
#: the share of the in-memory history's ``max_fingerprints`` one batch of pre-filled
#: sessions may take (the rest: the timed checks' steps, and room for error)
BATCH_SHARE: Final = 0.8
TARGET_IN_PROCESS: Final = 2.0
TARGET_DURABLE: Final = 1.2

PER_CALL: Final = """\
version: 1
default: deny
scopes:
  tools:
    shell: shell
    read_file: filesystem
    write_file: filesystem
    fetch_url: network
    http_post: network
    "*": data
rules:
  - id: agent-tools
    decision: allow
    reason: the agent's own tools
    kind: tool
    name: [fetch_url, read_email, send_email, read_file, write_file, shell, http_post,
           vault_get, transfer]
  - id: no-raw-sockets
    decision: deny
    reason: raw network tools are never run by an agent
    scope: shell
    shell:
      commands:
        - {program: [nc, ncat, netcat, socat, telnet]}
  - id: no-internal-addresses
    decision: deny
    reason: loopback and private addresses are off limits
    scope: network
    params:
      ip_class: {in: [loopback, private, link-local, unspecified, reserved]}
  - id: transfer-cap
    decision: require_approval
    reason: transfers over 5000 need a human
    name: transfer
    params:
      args.amount: {gt: 5000}
"""

_SESSION_PART: Final = """\
tools:
  fetch_url: {labels: [untrusted]}
  read_email: {labels: [untrusted]}
  vault_get: {labels: [secret]}
labels:
  - id: secret-files
    attach: [secret]
    name: read_file
    params:
      path: {glob: ["*/.ssh/*", "*/.env", "*.pem", "*/.aws/credentials"]}
"""

_FLOW_RULES: Final = """\
  - id: flow-no-secret-out
    decision: deny
    reason: data a secret step returned may not leave
    name: [send_email, http_post, fetch_url, transfer, shell]
    session:
      flows_from: {labels: [secret]}
  - id: provenance-untrusted-destination
    decision: deny
    reason: a recipient, URL, account or command from untrusted content
    name: [send_email, http_post, transfer, shell]
    session:
      provenance:
        args: [to, url, account, command]
        from: [untrusted]
"""

_LABEL_RULES: Final = """\
  - id: taint-no-outbound-after-secret
    decision: deny
    reason: a session that read a secret sends nothing out
    name: [send_email, http_post, fetch_url, transfer]
    session: {labels: [secret, untrusted]}
"""

_HEAD, _RULES = PER_CALL.split("rules:\n", 1)
FLOWS: Final = _HEAD + _SESSION_PART + "rules:\n" + _RULES + _FLOW_RULES
#: labels only: the session read and the step written, no fingerprints compared
LABELS: Final = _HEAD + _SESSION_PART + "rules:\n" + _RULES + _LABEL_RULES


def _text(rng: random.Random, size: int, tokens: float = 0.1) -> str:
    """Prose-like text with a share of ``tokens`` (ids, keys: 24 letters and digits)."""
    words: list[str] = []
    length = 0
    while length < size:
        if rng.random() < tokens:
            word = "".join(rng.choices(string.ascii_letters + string.digits, k=24))
        else:
            word = "".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9)))
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:size]


def _calls(fresh: int | None = None) -> list[tuple[str, dict[str, Any]]]:
    """The checked calls: an agent's outbound and local calls, none carrying session
    data (the common case: every rule is tested in full, and none matches). With
    ``fresh``, every argument value is new (made from the number, of about the same
    length): none can be served from a cache of values seen before."""
    if fresh is None:
        return [
            (
                "send_email",
                {"to": "carol@corp.example", "subject": "Q3", "body": "Revenue up 12%."},
            ),
            ("fetch_url", {"url": "https://docs.example.org/api/charges"}),
            ("shell", {"command": "pytest -q tests/unit"}),
            ("http_post", {"url": "https://hooks.corp.example/ci", "data": '{"build": 1842}'}),
            ("read_file", {"path": "/workspace/src/app/views.py"}),
            ("write_file", {"path": "/workspace/src/app/client.py", "content": "import httpx\n"}),
            ("transfer", {"account": "DE44500105175407324931", "amount": 640}),
            ("send_email", {"to": "bob@corp.example", "subject": "Re: offsite", "body": "Yes."}),
        ]
    n = fresh
    return [
        (
            "send_email",
            {"to": f"carol{n}@corp.example", "subject": f"Q{n}", "body": f"Revenue up {n}%."},
        ),
        ("fetch_url", {"url": f"https://docs.example.org/api/charges/{n}"}),
        ("shell", {"command": f"pytest -q tests/unit -k t{n}"}),
        ("http_post", {"url": f"https://hooks.corp.example/ci/{n}", "data": f'{{"build": {n}}}'}),
        ("read_file", {"path": f"/workspace/src/app/views{n}.py"}),
        (
            "write_file",
            {"path": f"/workspace/src/app/c{n}.py", "content": f"import httpx  # {n}\n"},
        ),
        ("transfer", {"account": f"DE44500105175{n:09d}", "amount": 640}),
        (
            "send_email",
            {"to": f"bob{n}@corp.example", "subject": f"Re: offsite {n}", "body": "Yes."},
        ),
    ]


#: how a workload's argument values come: the same few values again and again (an
#: argument probe cache serves them), every value new, or every other check new
ARGUMENTS: Final = ("repeated", "new", "mix")
_fresh = iter(range(10**6, 10**9))  # never the same value twice in a run


#: distinct results whose fingerprints pre-filled sessions cycle through (made once:
#: a check's cost depends on how many steps and fingerprints it tests, not on whose)
POOL: Final = 64
_KINDS: Final[tuple[tuple[str, frozenset[str], int], ...]] = (
    ("fetch_url", frozenset({"untrusted"}), 2048),
    ("read_email", frozenset({"untrusted"}), 1024),
    ("read_file", frozenset({"secret"}), 256),
    ("read_file", frozenset(), 1024),
)
_pool: list[tuple[str, frozenset[int]]] = []


def _results() -> list[tuple[str, frozenset[int]]]:
    """(data, its fingerprints) of :data:`POOL` results of each kind, in kind order."""
    if not _pool:
        rng = random.Random(3)
        for n in range(POOL * len(_KINDS)):
            data = _text(rng, _KINDS[n % len(_KINDS)][2])
            _pool.append((data, of_data(data)))
    return _pool


def _prefill(history: SessionHistory, tenant: str, session: str, steps: int) -> list[str]:
    """A session as an agent task leaves it: its request, then executed steps with the
    fingerprints of what they returned. Returns what its secret reads returned."""
    secrets: list[str] = []
    pool = _results()
    offset = (hash(session) % POOL) * len(_KINDS)
    # what a guard of this history does with a result it settles in this process: its
    # tokens' grams kept for pieces sent in any order (absent in a tree before them)
    pieces = getattr(tails_of(history), "pieces", None)
    history.append(
        tenant,
        session,
        NewStep(
            "input",
            "input",
            "input",
            fingerprints=of_data("Summarise the CI article and mail carol@corp.example"),
            trusted=True,
            executed=True,
        ),
    )
    for n in range(steps - 1):
        name, labels, _ = _KINDS[n % len(_KINDS)]
        data, prints = pool[(offset + n) % len(pool)]
        decision_id = f"{session}-{n}"
        history.append(tenant, session, NewStep("tool", name, "allow", decision_id, labels=labels))
        if "secret" in labels:
            secrets.append(data)
        history.settle(tenant, session, decision_id, executed=True, fingerprints=prints)
        if pieces is not None:
            pieces.learn(tenant, session, data)
    return secrets


def _workload(
    history: SessionHistory | None,
    steps: int,
    calls: int,
    tag: str,
    arguments: str = "repeated",
    first: int = 0,
) -> list[Action]:
    """``calls`` actions over ``calls / CHECKS_PER_SESSION`` sessions (numbered from
    ``first``) pre-filled to ``steps`` steps (no history: the same actions, for the
    stateless check); their argument values as :data:`ARGUMENTS` says."""
    repeated = _calls()
    actions = []
    for s in range(first, first + max(1, calls // CHECKS_PER_SESSION)):
        session = f"{tag}-{s}"
        if history is not None:
            _prefill(history, "bench", session, steps)
        context = Context(tenant="bench", agent="agent", session_id=session)
        for i in range(CHECKS_PER_SESSION):
            new = arguments == "new" or (arguments == "mix" and i % 2 == 1)
            shapes = _calls(next(_fresh)) if new else repeated
            name, args = shapes[(s + i) % len(shapes)]
            actions.append(Action(kind="tool", name=name, arguments=args, context=context))
    return actions


def _held_by_one(steps: int) -> int:
    """The fingerprints one session pre-filled to ``steps`` steps holds, as counted
    against ``max_fingerprints`` (its steps' sets and its index)."""
    scratch = MemoryHistory(max_steps=BENCH_MAX_STEPS, max_fingerprints=None)
    _prefill(scratch, "bench", "sizing", steps)
    return scratch.fingerprints_held


def _batch(steps: int, sessions: int) -> int:
    """How many sessions pre-filled to ``steps`` steps the in-memory history keeps whole
    at once (within :data:`BATCH_SHARE` of ``max_fingerprints``): a subject's sessions
    are pre-filled and timed a batch at a time, so no timed session was demoted (gave
    up its steps: its checks would time an eviction and a "cannot tell", not its
    rules)."""
    if steps == 0:
        return sessions
    return max(1, min(sessions, int(MAX_FINGERPRINTS * BATCH_SHARE) // _held_by_one(steps)))


#: what a subject's timed checks decided, summed over its rounds (verdict: count), how
#: many batches a round, and how many of its timed sessions were found demoted or short
#: of a step after their checks
Census = dict[str, int]


def _subject(
    label: str,
    policy_text: str,
    steps: int,
    calls: int,
    store: str | None = None,
    arguments: str = "repeated",
) -> tuple[str, Callable[[], Stats], Guard, Census]:
    policy = load_policy_text(policy_text, file=f"{label}.yaml")
    reads_sessions = policy.sessions is not None
    history: SessionHistory | None = None
    sessions = max(1, calls // CHECKS_PER_SESSION)
    batch = sessions
    if reads_sessions and store is None:
        # each round fills sessions of its own, a batch at a time: keep one batch's (the
        # earlier ones give up their steps to the next, untimed), or the rounds pile up
        # gigabytes of steps, and the timed checks find their sessions demoted
        batch = _batch(steps, sessions)
        history = MemoryHistory(
            max_steps=BENCH_MAX_STEPS, max_sessions=batch, max_fingerprints=MAX_FINGERPRINTS
        )
    sink = MemorySink()
    guard = Guard(policy, sink=sink, store=store, sessions=history)
    if reads_sessions and history is None:
        history = guard.sessions  # the store's, or memory when the store has none
        if history is None:  # made with the first check
            guard.check(Action(kind="tool", name="read_file", arguments={"path": "/x"}))
            history = guard.sessions
    rounds = iter(range(1_000_000))
    census: Census = {"batches": -(-sessions // batch), "demoted": 0}
    expected_steps = steps + CHECKS_PER_SESSION  # each kept: none dropped, none demoted

    def timed() -> Stats:
        tag = f"{label}-{next(rounds)}"
        samples: list[int] = []
        wall = 0
        for first in range(0, sessions, batch):
            count = min(batch, sessions - first) * CHECKS_PER_SESSION
            actions = _workload(
                history if reads_sessions else None, steps, count, tag, arguments, first
            )
            seen = len(sink.events)
            part, part_wall = time_calls(guard.check, actions, len(actions), 0)
            samples.extend(part)
            wall += part_wall
            for event in sink.events[seen:]:
                if event.decision is not None:
                    verdict = event.decision.verdict.value
                    census[verdict] = census.get(verdict, 0) + 1
            del sink.events[seen:]  # the rounds would pile them up
            if reads_sessions and history is not None:
                for action in actions[::CHECKS_PER_SESSION]:
                    context = action.context
                    view = history.view(context.tenant or "", context.session_id or "")
                    if view.lost or len(view.steps) != expected_steps or view.past.counts:
                        census["demoted"] += 1
        return summarise(label, samples, wall)

    return label, timed, guard, census


def _best(
    rounds: int, subjects: Sequence[tuple[str, Callable[[], Stats], Guard, Census]]
) -> list[Stats]:
    best: dict[str, Stats] = {}
    for _ in range(rounds):
        for label, timed, _guard, _census in subjects:
            stats = timed()
            if label not in best or stats.p50_ns < best[label].p50_ns:
                best[label] = stats
    return [best[label] for label, _, _, _ in subjects]


def _ratio(stats: list[Stats], label: str, base: str) -> float:
    by = {s.label: s for s in stats}
    return by[label].p50_ns / by[base].p50_ns


def _check_the_rules_are_live(result: BenchResult) -> None:
    """The timed calls carry no session data, so every subject must give the baseline's
    verdicts; and a call that does carry a secret must be refused (the session rules
    were tested, not skipped)."""
    plain = Guard(load_policy_text(PER_CALL, file="per-call.yaml"), sink=MemorySink())
    flows = Guard(
        load_policy_text(FLOWS, file="flows.yaml"), sink=MemorySink(), sessions=MemoryHistory()
    )
    history = flows.sessions
    assert history is not None
    secrets = _prefill(history, "bench", "live", TYPICAL_STEPS)
    context = Context(tenant="bench", agent="agent", session_id="live")
    for name, args in _calls():
        action = Action(kind="tool", name=name, arguments=args, context=context)
        if plain.check(action).verdict != flows.check(action).verdict:
            result.problems.append(f"session rules changed the verdict of {name}")
    carried = secrets[-1][40:120]  # a piece of what the last secret read returned
    leak = Action(
        kind="tool",
        name="send_email",
        arguments={"to": "carol@corp.example", "subject": "x", "body": carried},
        context=context,
    )
    if flows.check(leak).verdict.value != "deny":
        result.problems.append("a call carrying a secret step's data was not refused")


def _check_the_census(
    result: BenchResult,
    subjects: Sequence[tuple[str, Callable[[], Stats], Guard, Census]],
    baselines: dict[str, Census],
) -> None:
    """Each subject's timed checks, over its rounds: the verdicts (none undetermined; the
    timed calls carry no session data, so under flows and provenance the baseline's
    with the same argument values — the labels-only rule refuses outbound calls of a
    session that read a secret), and no timed session demoted (a demoted session's checks time an
    eviction and a "cannot tell", not the rules its label names)."""
    for label, _, _, census in subjects:
        arguments = label.rsplit(", ", 1)[1].split()[0]
        baseline = baselines.get(arguments, next(iter(baselines.values())))
        verdicts = {k: v for k, v in census.items() if k not in ("batches", "demoted")}
        plain = {k: v for k, v in baseline.items() if k not in ("batches", "demoted")}
        result.info[f"census {label}"] = (
            f"{census['batches']} batch(es) a round; timed sessions demoted or short: "
            f"{census['demoted']}; verdicts {verdicts}"
        )
        if census["demoted"]:
            result.problems.append(
                f"{label}: {census['demoted']} timed sessions were demoted or dropped steps"
            )
        if verdicts.get("undetermined"):
            result.problems.append(f"{label}: {verdicts['undetermined']} checks undetermined")
        elif verdicts != plain and not label.startswith("labels only"):  # that one refuses
            result.problems.append(f"{label}: verdicts {verdicts}, the baseline's {plain}")


def _fingerprint_costs(result: BenchResult, quick: bool) -> None:
    """``of_data`` per KB of prose and of token-rich text (10% of words are 24-character
    ids or keys), and ``probe`` of a 1 KB argument of each."""
    rng = random.Random(7)
    for kind, tokens in (("prose", 0.0), ("token-rich", 0.1)):
        for kb in (1, 16):
            text = _text(rng, kb * 1024, tokens)
            repeats = max(2, (16 if quick else 64) // kb)
            gc.collect()
            began = time.perf_counter_ns()
            for _ in range(repeats):
                of_data(text)
            per_kb = (time.perf_counter_ns() - began) / repeats / kb / 1000
            result.info[f"of_data_us_per_kb {kind} {kb}KB"] = round(per_kb, 1)
        argument = _text(rng, 1024, tokens)
        repeats = 16 if quick else 64
        began = time.perf_counter_ns()
        for _ in range(repeats):
            probe(argument)
        result.info[f"probe_us_per_kb {kind} 1KB"] = round(
            (time.perf_counter_ns() - began) / repeats / 1000, 1
        )
        result.info[f"fingerprints_per_kb {kind}"] = round(
            len(of_data(_text(rng, 16 * 1024, tokens))) / 16, 1
        )
        if Pieces is not None:  # a result's tokens' grams kept, for pieces in any order
            text = _text(rng, 2048, tokens)
            repeats = 64 if quick else 256
            began = time.perf_counter_ns()
            for _ in range(repeats):
                Pieces().learn("bench", "s", text)
            result.info[f"pieces_learn_us_per_kb {kind} 2KB"] = round(
                (time.perf_counter_ns() - began) / repeats / 2 / 1000, 1
            )


def _memory_per_session(result: BenchResult) -> None:
    """What one session's history holds after :data:`FULL_STEPS` steps of 2 KB results,
    prose and token-rich (``tracemalloc``): each step's fingerprints made from its own
    result inside the measured window, as a guard makes them, so the sets and their
    integers count (made beforehand and handed over as they are, they would not)."""
    rng = random.Random(11)
    for kind, tokens in (("prose", 0.0), ("token-rich", 0.1)):
        history = MemoryHistory(max_steps=FULL_STEPS)
        texts = [_text(rng, 2048, tokens) for _ in range(FULL_STEPS)]
        sessions = 5
        grown, counts = _bytes_grown(_fill, history, texts, sessions)
        result.info[f"history_kb_per_session {kind} (200 steps, 2 KB results)"] = round(
            grown / sessions / 1024, 1
        )
        result.info[f"fingerprints_per_2KB_result {kind}"] = round(sum(counts) / len(counts), 1)
        if Pieces is not None:  # the grams of its tokens a session keeps (bounded)
            grown, _ = _bytes_grown(_learn, Pieces(), texts, sessions)
            result.info[f"pieces_kb_per_session {kind} (200 steps, 2 KB results)"] = round(
                grown / sessions / 1024, 1
            )
    # a full collection walks every container the process holds (a set's walk visits
    # each of its fingerprints): the pause every thread takes. Timed in a fresh process
    # (this one holds the subjects' histories, whose walk would hide the difference)
    done = subprocess.run(
        [sys.executable, "-c", "import bench.session as s; print(s.gc_pause())"],
        cwd=Path(__file__).resolve().parents[1],  # the repo's root: where bench is
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    result.info["full_gc_ms (5 sessions of 200 steps, 2 KB prose): held / none"] = (
        done.stdout.strip()
    )


def _bytes_grown(fill: Callable[..., _T], *args: Any) -> tuple[int, _T]:
    """What the process holds more after ``fill(*args)`` ran, a full collection either
    side (``tracemalloc``, by file), and what it returned."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    filled = fill(*args)
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    return sum(stat.size_diff for stat in after.compare_to(before, "filename")), filled


def _learn(pieces: Pieces, texts: list[str], sessions: int) -> None:
    """``sessions`` sessions' tokens of one result a text, kept as a guard keeps them."""
    for n in range(sessions):
        for text in texts:
            pieces.learn("bench", f"m-{n}", text)


def gc_pause() -> str:
    """A full collection's shortest of three with five sessions of :data:`FULL_STEPS`
    steps of 2 KB prose held in a :class:`MemoryHistory`, then with them gone (ms)."""
    rng = random.Random(11)
    texts = [_text(rng, 2048) for _ in range(FULL_STEPS)]
    history = MemoryHistory(max_steps=FULL_STEPS)
    held = sum(_fill(history, texts, 5))
    with_history = _full_gc_ms()
    del history
    return f"{with_history:.1f} / {_full_gc_ms():.1f} ({held:,} fingerprints)"


def _fill(history: MemoryHistory, texts: list[str], sessions: int) -> list[int]:
    """``sessions`` sessions of one executed step a text, each step's fingerprints made
    from its text here (as a guard makes them); how many each step got."""
    counts: list[int] = []
    for s in range(sessions):
        for n, text in enumerate(texts):
            decision_id = f"d-{s}-{n}"
            history.append("bench", f"m-{s}", NewStep("tool", "fetch_url", "allow", decision_id))
            prints = of_data(text)
            counts.append(len(prints))
            history.settle("bench", f"m-{s}", decision_id, executed=True, fingerprints=prints)
    return counts


def _full_gc_ms() -> float:
    """The shortest of three full collections, in milliseconds."""
    best = float("inf")
    for _ in range(3):
        began = time.perf_counter()
        gc.collect()
        best = min(best, time.perf_counter() - began)
    return best * 1000


def run(calls: int | None, quick: bool) -> BenchResult:
    calls = calls or (QUICK_CALLS if quick else DEFAULT_CALLS)
    result = BenchResult("session")
    base = "baseline: stateless check (per-call rules)"
    in_process = [
        _subject(f"{base}, {arguments} arguments", PER_CALL, 0, calls, arguments=arguments)
        for arguments in ARGUMENTS
    ]
    in_process.append(
        _subject(
            f"labels only, {TYPICAL_STEPS}-step sessions, repeated arguments",
            LABELS,
            TYPICAL_STEPS,
            calls,
        )
    )
    for steps in (TYPICAL_STEPS, FULL_STEPS):
        for arguments in ARGUMENTS:
            in_process.append(
                _subject(
                    f"session rules, {steps}-step sessions, {arguments} arguments",
                    FLOWS,
                    steps,
                    calls,
                    arguments=arguments,
                )
            )
    stats = _best(ROUNDS, in_process)
    _check_the_census(result, in_process, {a: in_process[i][3] for i, a in enumerate(ARGUMENTS)})
    for label, _, _, _ in in_process[len(ARGUMENTS) :]:
        arguments = label.rsplit(", ", 1)[1].split()[0]
        ratio = _ratio(stats, label, f"{base}, {arguments} arguments")
        result.info[f"ratio_p50 {label}"] = round(ratio, 2)
        if arguments == "mix":  # the target is judged on the mix (the others: info)
            result.targets.append(
                Target(f"{label} / stateless (p50)", ratio, "<=", TARGET_IN_PROCESS, "x")
            )
    result.stats.extend(stats)

    with tempfile.TemporaryDirectory(prefix="interlock-bench-session-") as scratch:
        durable_calls = max(200, calls // 10)
        plain_store = f"sqlite:///{Path(scratch) / 'plain.db'}"
        session_store = f"sqlite:///{Path(scratch) / 'session.db'}"
        durable = [
            _subject(
                "durable: stateless check, SQLite store", PER_CALL, 0, durable_calls, plain_store
            ),
            _subject(
                f"durable: session rules, {TYPICAL_STEPS}-step sessions, SQLite store",
                FLOWS,
                TYPICAL_STEPS,
                durable_calls,
                session_store,
            ),
        ]
        history = durable[1][2].sessions
        where = type(history).__name__ if history is not None else "none"
        result.info["durable_history"] = where
        if isinstance(history, MemoryHistory):
            result.notes.append(
                "the SQLite store offers no session history on this branch: the durable "
                "subject kept its history in memory (the store's audit is durable)"
            )
        try:
            durable_stats = _best(ROUNDS, durable)
        finally:
            for _, _, guard, _ in durable:
                guard.close()
    ratio = durable_stats[1].p50_ns / durable_stats[0].p50_ns
    result.info["ratio_p50 durable"] = round(ratio, 2)
    result.targets.append(
        Target("durable session rules / durable stateless (p50)", ratio, "<=", TARGET_DURABLE, "x")
    )
    result.stats.extend(durable_stats)
    _check_the_census(result, durable[1:], {"repeated": durable[0][3]})

    _check_the_rules_are_live(result)
    _fingerprint_costs(result, quick)
    _memory_per_session(result)
    result.notes.append(
        f"sessions pre-filled with executed steps and their results' fingerprints; each "
        f"session then takes {CHECKS_PER_SESSION} timed checks (appending its steps)"
    )
    return result
