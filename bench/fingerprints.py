"""Benchmark ``fingerprints``: what ``of_data`` costs per KiB of a result and ``probe``
per argument, the current module (on its C accelerator when built: ``now``) against the
same module on its pure-Python path (``python``: ``INTERLOCK_NO_SPEEDUPS=1``), the wave-1
one (``bench/fingerprints_v1.py``) and ``hashlib.sha256`` of the same bytes, measured
interleaved in the same run (the ratios are what to read: this machine's speed drifts).

Run: ``python -m bench.fingerprints [--quick]`` (under ``flock /tmp/interlock-bench.lock``).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import importlib.util
import os
import random
import statistics
import time
from collections.abc import Callable
from types import ModuleType

from interlock.session import fingerprints as current

from . import fingerprints_v1 as v1


def _pure_python() -> ModuleType:
    """A second copy of the fingerprints module, loaded with ``INTERLOCK_NO_SPEEDUPS=1``:
    the pure-Python path, with no switch in the timed calls."""
    spec = importlib.util.spec_from_file_location("bench._fingerprints_python", current.__file__)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    was = os.environ.get("INTERLOCK_NO_SPEEDUPS")
    os.environ["INTERLOCK_NO_SPEEDUPS"] = "1"
    try:
        spec.loader.exec_module(module)
    finally:
        if was is None:
            del os.environ["INTERLOCK_NO_SPEEDUPS"]
        else:
            os.environ["INTERLOCK_NO_SPEEDUPS"] = was
    assert not module.ACCELERATED
    return module


python = _pure_python()

_WORDS = [
    "the",
    "report",
    "for",
    "march",
    "shows",
    "revenue",
    "up",
    "four",
    "percent",
    "over",
    "plan",
    "while",
    "costs",
    "held",
    "steady",
    "and",
    "the",
    "team",
    "expects",
    "the",
    "new",
    "contract",
    "to",
    "close",
    "before",
    "the",
    "summer",
]


def _prose(size: int) -> str:
    rng = random.Random(3)
    words = []
    while sum(map(len, words)) + len(words) < size:
        words.append(rng.choice(_WORDS))
    return " ".join(words)[:size]


def _code(size: int) -> str:
    lines = [
        "import os",
        'AWS_SECRET_ACCESS_KEY = os.environ["AWS_SECRET_ACCESS_KEY"]',
        "def get_client(region_name: str = 'eu-west-1') -> S3Client:",
        "    return boto3.client('s3', aws_secret_access_key=AWS_SECRET_ACCESS_KEY)",
        "export DATABASE_URL=postgresql://app@db.internal:5432/orders",
        "# retry three times with exponential backoff before giving up",
    ]
    out = []
    while sum(map(len, out)) + len(out) < size:
        out.extend(lines)
    return "\n".join(out)[:size]


def _blob(size: int) -> str:
    raw = base64.b64encode(random.Random(5).randbytes(size)).decode()[:size]
    return "\n".join(raw[i : i + 64] for i in range(0, len(raw), 64))


def _median_us(fns: dict[str, Callable[[], object]], calls: int) -> dict[str, float]:
    """Each function's median in µs, the functions called in turn (so a drift of the
    machine's speed hits them alike)."""
    samples: dict[str, list[int]] = {name: [] for name in fns}
    for fn in fns.values():
        fn()
    for _ in range(calls):
        for name, fn in fns.items():
            start = time.perf_counter_ns()
            fn()
            samples[name].append(time.perf_counter_ns() - start)
    return {name: statistics.median(s) / 1000 for name, s in samples.items()}


def run(calls: int) -> None:
    print("fingerprints benchmark (medians; ratios within this run)")
    print(f"  now: the C accelerator {'' if current.ACCELERATED else 'NOT '}in use")
    print(
        f"  {'':30}{'now':>8}{'python':>8}{'wave 1':>8}{'sha256':>8}"
        f"{'now/py':>8}{'now/w1':>8}{'now/sha':>8}"
    )
    for label, text in (
        ("of_data prose 1 KiB", _prose(1024)),
        ("of_data code/.env 1 KiB", _code(1024)),
        ("of_data base64 1 KiB", _blob(1024)),
        ("of_data prose 100 KiB", _prose(100 * 1024)),
    ):
        kib = len(text.encode()) / 1024
        data = text.encode()
        got = _median_us(
            {
                "now": lambda t=text: current.of_data(t),
                "py": lambda t=text: python.of_data(t),
                "v1": lambda t=text: v1.of_data(t),
                "sha": lambda d=data: hashlib.sha256(d).digest(),
            },
            max(calls // int(kib), 5),
        )
        _row(f"{label} (/KiB)", {k: v / kib for k, v in got.items()})
    for label, argument in (
        ("probe 200-char argument", {"to": "bob@corp.example", "body": _prose(200)}),
        ("probe 46-char URL", "https://api.example.com/v2/orders?id=8f3Ab29cQ"),
    ):
        body = "".join(current.texts_of(argument)).encode()
        got = _median_us(
            {
                "now": lambda a=argument: current.probe(a),
                "py": lambda a=argument: python.probe(a),
                "v1": lambda a=argument: v1.probe(a),
                "sha": lambda b=body: hashlib.sha256(b).digest(),
            },
            calls,
        )
        _row(label, got)
    for label, text in (("prose", _prose(1024)), ("code/.env", _code(1024))):
        kib = len(text.encode()) / 1024
        print(
            f"  kept per KiB of {label}: {len(current.of_data(text)) / kib:.0f} "
            f"(wave 1: {len(v1.of_data(text)) / kib:.0f})"
        )


def _row(label: str, got: dict[str, float]) -> None:
    print(
        f"  {label:30}{got['now']:8.1f}{got['py']:8.1f}{got['v1']:8.1f}{got['sha']:8.2f}"
        f"{got['now'] / got['py']:8.2f}{got['now'] / got['v1']:8.2f}{got['now'] / got['sha']:8.0f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    run(100 if args.quick else 1000)


if __name__ == "__main__":
    main()
