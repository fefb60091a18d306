"""Print the Interlock server's OpenAPI document (what ``GET /v1/openapi.json`` serves).

The app is built over a throwaway SQLite store, so no server needs to run:

    python scripts/openapi.py > openapi.json
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from interlock import Guard, load_policy_text
from interlock.server import create_app

POLICY = "version: 1\ndefault: deny\nrules: []\n"


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="interlock-openapi-") as folder:
        guard = Guard(load_policy_text(POLICY), store=f"sqlite:///{Path(folder) / 'api.db'}")
        try:
            document = create_app(guard).openapi()
        finally:
            guard.close()
    json.dump(document, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
