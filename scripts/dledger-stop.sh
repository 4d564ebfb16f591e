#!/usr/bin/env bash
# Stops the DLedger group started by scripts/dledger-start.sh: SIGTERM to every node (clean
# shutdown: flush, checkpoint, abort file removed), waits for each to exit, SIGKILL after 20 s
# (the broker itself exits within shutdownTimeoutMillis + 5 s; past that its stacks are asked
# for with SIGUSR1 first, into its log).
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/broker-lib.sh
stopping=()
for n in n0 n1 n2; do
  if pid=$(signal_stop "dledger-$n"); then stopping+=("dledger-$n:$pid"); fi
done
for entry in "${stopping[@]}"; do
  await_stop "${entry%%:*}" "${entry#*:}"
done
