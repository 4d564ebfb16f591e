#!/usr/bin/env bash
# Sets up the virtual environment and runs the whole test suite.
# Extra arguments go to pytest (e.g. scripts/test.sh -m soak).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
set +e
.venv/bin/python -m pytest "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: treating as failure" >&2
  exit 1
fi
exit "$rc"
