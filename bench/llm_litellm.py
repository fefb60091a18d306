"""LiteLLM's proxy, the baseline of the ``llm-proxy`` benchmark, in a process and an
environment of its own.

The environment (``bench/.litellm-venv``; ``INTERLOCK_BENCH_LITELLM_VENV`` moves it)
is created from the pinned ``bench/llm_litellm.requirements.txt`` on first use, or by
``python -m bench.llm_litellm --setup``. The proxy runs as LiteLLM ships it — its
``litellm`` command on uvicorn, one worker — with a config of one model routed to the
benchmark's stand-in, a master key (so every call is authenticated, as Interlock's
are) and no database (LiteLLM keeps virtual keys and spend in PostgreSQL; without one
it checks the master key only). ``LITELLM_LOCAL_MODEL_COST_MAP`` keeps it off the
network (it fetches a price table at start-up otherwise) and ``LITELLM_LOG=WARNING``
turns off its access log, as ``--log-level warning`` does for Interlock's proxy.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Final

__all__ = [
    "MASTER_KEY",
    "REQUIREMENTS",
    "config_yaml",
    "ensure_litellm",
    "litellm_argv",
    "litellm_command",
    "litellm_env",
]

ROOT: Final = Path(__file__).resolve().parents[1]
REQUIREMENTS: Final = Path(__file__).resolve().with_name("llm_litellm.requirements.txt")
DEFAULT_VENV: Final = ROOT / "bench" / ".litellm-venv"
MASTER_KEY: Final = "sk-litellm-bench"


def venv_dir() -> Path:
    return Path(os.environ.get("INTERLOCK_BENCH_LITELLM_VENV") or DEFAULT_VENV)


def _digest() -> str:
    return hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()


def litellm_command(venv: Path | None = None) -> Path | None:
    """The environment's ``litellm`` command if it is installed from the current pins."""
    venv = venv or venv_dir()
    command = venv / "bin" / "litellm"
    marker = venv / ".installed"
    installed = marker.read_text(encoding="utf-8").strip() if marker.exists() else None
    return command if command.exists() and installed == _digest() else None


def ensure_litellm(venv: Path | None = None) -> Path:
    """The ``litellm`` command, creating the environment first if needed (about
    1.5 min and 750 MB here)."""
    venv = venv or venv_dir()
    command = litellm_command(venv)
    if command is not None:
        return command
    print(f"  creating LiteLLM's environment in {venv} (once) ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, "-r", str(REQUIREMENTS)], check=True)
    (venv / ".installed").write_text(_digest() + "\n", encoding="utf-8")
    return venv / "bin" / "litellm"


def config_yaml(model: str, upstream: str, upstream_key: str) -> str:
    """LiteLLM's config: ``model`` routed to the OpenAI-compatible ``upstream`` (…/v1)."""
    return (
        "model_list:\n"
        f"  - model_name: {model}\n"
        "    litellm_params:\n"
        f"      model: openai/{model}\n"
        f"      api_base: {upstream}\n"
        f"      api_key: {upstream_key}\n"
        "litellm_settings:\n"
        "  telemetry: false\n"
        "general_settings:\n"
        f"  master_key: {MASTER_KEY}\n"
    )


def litellm_argv(command: Path, config: Path, port: int) -> list[str]:
    return [str(command), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]


def litellm_env() -> dict[str, str]:
    return {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "WARNING"}


if __name__ == "__main__":  # ``python -m bench.llm_litellm --setup``: the environment only
    if sys.argv[1:] != ["--setup"]:
        raise SystemExit("usage: python -m bench.llm_litellm --setup")
    print(ensure_litellm())
