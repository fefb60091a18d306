#!/usr/bin/env bash
# The four C accelerators (session fingerprints and records, a record's redaction walk,
# its chain link) built under AddressSanitizer and UndefinedBehaviorSanitizer, and the
# tests of their paths run against those builds: a read past a buffer, a use of a freed
# object or undefined arithmetic aborts the run with a report, where the normal build
# could pass silently. `make test-sanitized` runs it; `make test` (and so CI) includes it
# (docs/adr/0042-the-accelerators-under-sanitizers.md).
#
# A copy of src/ in build/sanitized holds the sanitized extensions, so the editable
# install's own builds stay as they are. Needs gcc (or $CC) with its sanitizer runtimes
# (Debian: libasan8, libubsan1 — gcc's own dependencies). Never falls back to the Python
# paths: each extension must load from the sanitized tree, or the run fails.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-.venv/bin/python}
cc=${CC:-gcc}
out=build/sanitized
modules=(session/_speedups session/_history core/_redaction store/_chain)

command -v "$cc" >/dev/null 2>&1 || { echo "test-sanitized: no C compiler ($cc)" >&2; exit 1; }
asan=$("$cc" -print-file-name=libasan.so)
ubsan=$("$cc" -print-file-name=libubsan.so)
for runtime in "$asan" "$ubsan"; do
  [ -f "$runtime" ] || { echo "test-sanitized: $cc has no runtime $runtime" >&2; exit 1; }
done

rm -rf "$out"
mkdir -p "$out"
cp -r src "$out/src"
find "$out/src" \( -name '*.so' -o -name '__pycache__' \) -prune -exec rm -rf {} +
suffix=$("$python" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
include=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
for module in "${modules[@]}"; do
  "$cc" -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
    -fno-sanitize-recover=all -Wall -Wextra -Wno-unused-parameter \
    -Wno-missing-field-initializers -Werror -shared -fPIC -I"$include" \
    "src/interlock/$module.c" -o "$out/src/interlock/$module$suffix"
done

# leaks are CPython's own (interned objects kept to exit), not the extensions': off.
# PYTHONMALLOC=malloc: every Python object comes from the sanitizer's allocator, so a
# freed object read from C is caught too.
export LD_PRELOAD="$asan:$ubsan"
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:strict_string_checks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export PYTHONMALLOC=malloc
export PYTHONPATH="$PWD/$out/src:$PWD"
unset INTERLOCK_NO_SPEEDUPS

"$python" - "$out" <<'EOF'
import importlib
import sys
from pathlib import Path

from interlock.accelerators import accelerators

tree = Path(sys.argv[1]).resolve()
for accelerator in accelerators():
    module = importlib.import_module(accelerator.module)
    where = Path(module.__file__ or "").resolve()
    if not accelerator.in_use or tree not in where.parents:
        sys.exit(f"test-sanitized: {accelerator.name} is not the sanitized build ({where})")
print(f"test-sanitized: {len(accelerators())} accelerators from {tree}")
EOF

"$python" -m pytest -q -p no:cacheprovider \
  tests/test_accelerators_hostile.py \
  tests/session \
  tests/core/test_redaction*.py \
  tests/store/test_chain_accelerated.py \
  "$@"
