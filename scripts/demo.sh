#!/usr/bin/env bash
# Sets up the virtual environment and runs the main job on an embedded default
# (master/slave -> DLedger group; `scripts/demo.sh --to controller` goes on into Controller mode).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python -m tools.demo "$@"
