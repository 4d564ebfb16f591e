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
# Apache RocketMQ 4.9.8 beside the project (../shared): its tools and Java client, used by the
# tests against real Apache clients, need Debian jars; its install-deps.sh installs them once
# (apt, as root; it returns at once when they are there)
APACHE=../shared/apache-rocketmq-4.9.8
if [ -x "$APACHE/install-deps.sh" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  "$APACHE/install-deps.sh" || echo "setup.sh: $APACHE/install-deps.sh failed: the tests with Apache's Java tools will fail" >&2
fi
