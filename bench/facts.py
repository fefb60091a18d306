"""What the semantic facts cost: parsing a shell command, reading a URL, and a check
whose workload carries them.

Subjects, all in one run (so the ratios hold whatever the machine does):

- shell: ``shlex.split`` (the stdlib's tokenizer: the floor any parse pays) vs
  ``shell_facts`` with its cache bypassed (every call parses) vs ``shell_facts``
  cached (the same strings again), on 12 typical one-line commands;
- URL: ``urlsplit(url).hostname`` (the stdlib floor) vs ``url_facts`` uncached on plain
  URLs (its fast path) and on tricky ones (the WHATWG parser and the second opinion)
  vs cached;
- the check: ``evaluate`` under the benchmark's 100-rule policy with the example
  policy's shell, file and URL rules added, on the check benchmark's 22 actions alone
  and on the same 22 mixed with 11 shell, URL and file calls (facts uncached: every
  command and URL string is new to the caches).
"""

from __future__ import annotations

import itertools
import shlex
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import yaml

from bench.harness import BenchResult, Target, summarise, time_calls, timer_overhead
from interlock import Action
from interlock.facts.shell import shell_facts
from interlock.facts.url import url_facts
from interlock.policy import load_policy_text
from interlock.policy.engine import evaluate

__all__ = ["COMMANDS", "run"]

DEFAULT_CALLS = 50_000

COMMANDS: tuple[str, ...] = (
    "ls -la /workspace",
    "cat README.md",
    "grep -rn 'TODO' src/",
    "head -n 20 logs/app.log",
    "find . -name '*.py' -type f",
    "git status --short",
    "ls -la /tmp; pwd",
    "cat a.txt | grep foo | wc -l",
    "echo done > /dev/null",
    "tail -f /var/log/syslog",
    "python3 -m pytest -q tests/unit",
    "sort data.csv | uniq -c | sort -rn | head",
)
PLAIN_URLS: tuple[str, ...] = (
    "https://docs.example.com/guide/install?lang=en",
    "https://api.github.com/repos/acme/app/issues",
    "http://x.example.org/a/b/c#frag",
    "https://pypi.example.com/simple/requests/",
)
TRICKY_URLS: tuple[str, ...] = (
    "https://evil.example\\@docs.example.com/",
    "http://0x7f.1/admin",
    "https://user:pw@docs.example.com/x",
    "https://пример.рф/путь",
)


def _unique(values: Sequence[str], count: int) -> list[str]:
    """``count`` strings, each new to a cache: the values with a varying suffix that
    does not change what they mean (a comment for commands, a query for URLs)."""
    out = []
    for i, value in zip(range(count), itertools.cycle(values), strict=False):
        if value.startswith(("http://", "https://")):
            out.append(f"{value}{'&' if '?' in value else '?'}n={i}")
        else:
            out.append(f"{value}  # {i}")
    return out


def _policy() -> Any:
    from bench.check import build
    from interlock.demo import example_policy_text

    base = yaml.safe_load(build().yaml_text)
    example = yaml.safe_load(example_policy_text())
    wanted = {
        "shell-read-only",
        "shell-no-destruction",
        "files-no-secrets",
        "net-known-hosts",
        "net-no-internal-addresses",
    }
    # The example's fact-based rules replace the benchmark's rules of the same id.
    base["rules"] = [rule for rule in base["rules"] if rule["id"] not in wanted]
    base["rules"].extend(rule for rule in example["rules"] if rule["id"] in wanted)
    base["scopes"]["tools"].pop("shell", None)
    return load_policy_text(yaml.safe_dump(base, sort_keys=False), file="bench/facts-policy.yaml")


def _fact_actions(count: int) -> list[Action]:
    shell = _unique((*COMMANDS[:6], "ls /tmp; rm -rf /x", "cat /etc/shadow"), count)
    urls = _unique((*PLAIN_URLS[:2], "http://0x7f.1/admin"), count)
    out: list[Action] = []
    for i in range(count):
        if i % 3 == 0:
            out.append(Action.tool("fetch_url", {"url": urls[i]}))
        else:
            out.append(Action.tool("run_shell", {"command": shell[i]}))
    return out


def run(calls: int | None = None, quick: bool = False) -> BenchResult:
    calls = calls or (5_000 if quick else DEFAULT_CALLS)
    warmup = min(2_000, calls // 5)
    result = BenchResult(name="facts")

    def timed(label: str, fn: Callable[[Any], object], inputs: Sequence[Any]) -> None:
        samples, wall = time_calls(fn, inputs, calls, warmup)
        result.stats.append(summarise(label, samples, wall))

    fresh = _unique(COMMANDS, calls + warmup)
    timed("shlex.split (floor)", shlex.split, fresh)
    timed("shell_facts, parsed each time", shell_facts.__wrapped__, fresh)  # type: ignore[attr-defined]
    for command in COMMANDS:
        shell_facts(command)
    timed("shell_facts, cached", shell_facts, COMMANDS)

    plain = _unique(PLAIN_URLS, calls + warmup)
    timed("urlsplit().hostname (floor)", lambda u: urlsplit(u).hostname, plain)
    timed("url_facts, plain URL, uncached", url_facts.__wrapped__, plain)  # type: ignore[attr-defined]
    tricky = list(TRICKY_URLS)
    timed("url_facts, tricky URL, uncached", url_facts.__wrapped__, tricky)  # type: ignore[attr-defined]
    timed("url_facts, cached", url_facts, PLAIN_URLS)

    from bench.check import build

    policy = _policy()
    base_actions = build().actions
    timed("evaluate: check workload (22 actions)", lambda a: evaluate(a, policy), base_actions)
    mixed = [*base_actions, *_fact_actions(11)]
    shell_facts.cache_clear()
    url_facts.cache_clear()
    fresh_facts = _fact_actions(calls + warmup)
    mix = [
        base_actions[i % len(base_actions)] if i % 3 else fresh_facts[i]
        for i in range(calls + warmup)
    ]
    timed("evaluate: + shell/URL/file calls, uncached", lambda a: evaluate(a, policy), mix)
    timed("evaluate: + shell/URL/file calls, cached", lambda a: evaluate(a, policy), mixed)
    samples, wall = timer_overhead(calls)
    result.stats.append(summarise("timer overhead (empty)", samples, wall))

    by = {s.label: s for s in result.stats}
    parse = by["shell_facts, parsed each time"].p50_ns / 1000
    floor = by["shlex.split (floor)"].p50_ns / 1000
    url = by["url_facts, plain URL, uncached"].p50_ns / 1000
    result.targets = [
        Target("shell_facts p50, a typical one-line command", parse, "<=", 20.0, "µs"),
        Target("url_facts p50, a plain URL", url, "<=", 3.0, "µs"),
    ]
    result.info = {
        "commands": list(COMMANDS),
        "plain_urls": list(PLAIN_URLS),
        "tricky_urls": list(TRICKY_URLS),
        "policy_rules": len(policy.rules),
        "ratios": {
            "shell_facts / shlex.split (p50)": round(parse / floor, 2),
            "url_facts plain / urlsplit (p50)": round(
                url / (by["urlsplit().hostname (floor)"].p50_ns / 1000), 2
            ),
            "evaluate mixed uncached / check workload (p50)": round(
                by["evaluate: + shell/URL/file calls, uncached"].p50_ns
                / by["evaluate: check workload (22 actions)"].p50_ns,
                2,
            ),
        },
    }
    return result
