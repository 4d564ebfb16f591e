#!/usr/bin/env bash
# Sets up the virtual environment and runs the main job on an embedded default.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python -m tools.demo "$@"
