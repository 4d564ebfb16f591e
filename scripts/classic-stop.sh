#!/usr/bin/env bash
# Stops the classic pair started by scripts/classic-start.sh, slave first (SIGTERM = clean
# shutdown; SIGKILL after 20 s, its stacks asked for first with SIGUSR1: the broker itself exits
# within shutdownTimeoutMillis + 5 s).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/broker-lib.sh
for name in broker-a-s broker-a; do
  if pid=$(signal_stop "$name"); then await_stop "$name" "$pid"; fi
done
