#!/usr/bin/env bash
# Creates ./.venv (once) and installs the project with its test extras into it.
# Idempotent: a second run only re-checks the install.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# the install is redone when the project's files or a compiled module's source change (setup.py
# compiles broker/native.py's modules with mypyc into .so files beside them)
native=$("$PY" -c "import runpy; print(' '.join(n.replace('.', '/') + '.py' for n in runpy.run_path('broker/native.py')['NATIVE_MODULES']))")
stamp=.venv/.installed-$(cat pyproject.toml setup.py broker/native.py $native | sha1sum | cut -c1-12)
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e '.[test]'
  rm -f .venv/.installed-*
  touch "$stamp"
fi
