#!/usr/bin/env bash
# Long fault soak: seeded random nemesis schedules on a real three-node DLedger group and a
# classic pair until the time limit, then the results table (per nemesis: runs, acknowledged,
# lost, duplicated, unknown, max unavailability). Usage: scripts/soak.sh [minutes] (default 10).
# FAULT_SEED=<n> reproduces a soak; run directories are kept under $SOAK_DIR (default /tmp/rmqpy-soak).
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${1:-10}
SOAK_DIR=${SOAK_DIR:-/tmp/rmqpy-soak}
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3
export FAULT_SOAK_MINUTES="$MINUTES"
# hard stop: the budget plus room for the last round and the clean shutdown
exec timeout --kill-after=30 $(( MINUTES * 60 + 300 )) \
  "$PY" -m pytest tests/faults/test_soak.py -m soak -p no:cacheprovider --basetemp="$SOAK_DIR" -q -s
