"""The false-positive corpus of the fingerprint tests and bench: benign arguments (the
bypass corpus's benign shell commands, URLs and paths, and ordinary mail bodies,
messages and commands written here) and unrelated results (package metadata pages,
Python sources and documentation from the standard library: text an agent reads, which
none of the arguments came from)."""

from __future__ import annotations

import importlib.metadata
import sysconfig
from pathlib import Path
from typing import Any

__all__ = ["benign_arguments", "unrelated_results"]

MAILS = [
    "Hi Anna, thanks for the notes from yesterday. I'll send the revised draft on Friday.",
    "Dear team, the quarterly review moved to Thursday 3pm in room B. Please bring laptops.",
    "Can you check whether the invoice for March was paid? The vendor asked again today.",
    "Reminder: the office will be closed on Monday for the public holiday. Enjoy the weekend!",
    "Hello Mr. Patel, I am writing to confirm our appointment on 12 June at 10:30.",
    "The build is green again after the fix to the date parser. Deploying to staging now.",
    "Please find attached the minutes of the board meeting; comments welcome until Tuesday.",
    "Lunch tomorrow? The new Thai place on Baker Street has good reviews.",
    "I reviewed the pull request; two small comments about naming, otherwise looks good.",
    "Our flight lands at 18:45; we will take a taxi to the hotel and call you from there.",
    "Could you share the slides from the customer workshop with Maria and Tom?",
    "The printer on the third floor is out of toner again, I ordered a new cartridge.",
    "Summary of today's standup: backend migration 80% done, frontend blocked on API docs.",
    "Welcome aboard! Your onboarding session is on Monday at 9am with the people team.",
    "Happy birthday Sam! Hope you have a great day and that the cake is chocolate.",
    "Following up on my previous email regarding the contract renewal terms for 2027.",
    "The survey results are in: 72% of respondents prefer the new dashboard layout.",
    "We need two more volunteers for the charity run on Saturday morning.",
    "Please update your password before the end of the month as per the security policy.",
    "The shipment was delayed by customs; new expected delivery date is next Wednesday.",
]
MESSAGES = [
    {"to": "anna@example.org", "subject": "Draft", "body": MAILS[0]},
    {"to": "team@corp.example", "subject": "Review moved", "body": MAILS[1]},
    {"channel": "#general", "text": "deploy finished, all checks passed"},
    {"query": "weather in Lisbon next week"},
    {"query": "python list comprehension vs generator expression"},
    {"url": "https://en.wikipedia.org/wiki/Alan_Turing"},
    {"url": "https://news.ycombinator.com/item?id=41234567"},
    {"url": "https://api.openweathermap.org/data/2.5/weather?q=London&units=metric"},
    {"path": "/home/user/projects/report/summary.md", "content": "# Summary\n\nAll good."},
    {"command": "git log --oneline -n 20"},
    {"command": "pytest -q tests/unit"},
    {"command": "docker ps --format '{{.Names}}'"},
    {"command": "kubectl get pods -n staging"},
    {"sql": "SELECT id, name FROM customers WHERE created_at > now() - interval '7 days'"},
    {"amount": 125.5, "currency": "EUR", "iban": "DE89370400440532013000"},
]


def benign_arguments() -> list[Any]:
    """Argument values of ordinary calls."""
    from corpus.cases_benign import PATHS, SHELL, URLS

    out: list[Any] = [case.args for case in (*SHELL, *URLS, *PATHS)]
    out += [{"to": "someone@example.com", "body": mail} for mail in MAILS]
    out += MESSAGES
    return out


def unrelated_results(limit: int = 120) -> list[str]:
    """Texts an agent might read: package pages (METADATA), standard-library sources
    and their documentation strings — chosen by name, so every run reads the same."""
    texts: list[str] = []
    names = sorted(
        {d.metadata["Name"].lower(): d for d in importlib.metadata.distributions()}.items()
    )
    for _, dist in names[: limit // 2]:
        text = dist.read_text("METADATA") or ""
        if text:
            texts.append(text[:20_000])
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for name in sorted(
        [
            "json/decoder.py",
            "email/message.py",
            "http/client.py",
            "urllib/parse.py",
            "csv.py",
            "smtplib.py",
            "argparse.py",
            "logging/__init__.py",
            "shutil.py",
            "subprocess.py",
            "textwrap.py",
            "zipfile.py" if (stdlib / "zipfile.py").exists() else "zipfile/__init__.py",
            "imaplib.py",
            "ftplib.py",
            "mailbox.py",
            "webbrowser.py",
        ]
    ):
        path = stdlib / name
        if path.exists():
            texts.append(path.read_text(errors="replace")[:20_000])
    return texts[:limit]
