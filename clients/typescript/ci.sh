#!/usr/bin/env bash
# The TypeScript client's CI: install from the lock file, type check, build, check the
# generated API types against the server's OpenAPI document, run the tests (which start
# a live `interlock serve`). Needs Node 20+ and the repository's .venv with interlock
# installed (or $INTERLOCK_PYTHON). Called by .ci/run.
set -euo pipefail
cd "$(dirname "$0")"
export INTERLOCK_PYTHON="${INTERLOCK_PYTHON:-$(cd ../.. && pwd)/.venv/bin/python}"
if ! "$INTERLOCK_PYTHON" -c "import interlock" 2>/dev/null; then
  echo "ci.sh: $INTERLOCK_PYTHON cannot import interlock: make the repository's .venv first" >&2
  exit 2
fi
npm ci --no-audit --no-fund
npm run build      # first: examples and tests import the package by its name (dist/)
npm run typecheck
npm run check:types
npx vitest run
