#!/usr/bin/env bash
# Starts the three-node DLedger group (conf/dledger/broker-n0.conf, -n1, -n2) in the background
# on 127.0.0.1, waits until a leader is master, and prints the group's status. Logs and pid files
# go to $RMQPY_RUN (default /tmp/rmqpy/run); $RMQPY_DLEDGER_CONF picks another conf dir. Stop with
# scripts/dledger-stop.sh.
# Exit code 0 only when each of *our* three processes answers on its own port (its /status names
# its pid and brokerName: another group answering there does not count) and one is master within
# $RMQPY_START_TIMEOUT s (default 30). A broker that exits fails the start at once, with the line
# its log ends on (e.g. "address already in use"); the others keep running (dledger-stop.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/broker-lib.sh
CONF=${RMQPY_DLEDGER_CONF:-conf/dledger}
mkdir -p "$RUN"
for n in n0 n1 n2; do
  launch "dledger-$n" "$CONF/broker-$n.conf"
done
if ! "$PY" scripts/wait_brokers.py --master --timeout "${RMQPY_START_TIMEOUT:-30}" "${brokers[@]}"; then
  echo "the DLedger group did not start; stop what runs with scripts/dledger-stop.sh" >&2
  exit 1
fi
all=$(IFS=,; echo "${addrs[*]}")
"$PY" -m broker.cli.mqadmin dledgerStatus -b "$all" || true
