#!/usr/bin/env bash
# Starts the classic pair (conf/classic/broker-a.conf master + broker-a-s.conf slave) in the
# background on 127.0.0.1. Logs and pid files go to $RMQPY_RUN (default /tmp/rmqpy/run);
# $RMQPY_CLASSIC_CONF picks another conf dir. Stop with scripts/classic-stop.sh.
# Exit code 0 only when both of *our* processes answer on their own ports (/status names their
# pid and brokerName) within $RMQPY_START_TIMEOUT s (default 30); a broker that exits fails the
# start at once with the line its log ends on (e.g. "address already in use").
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/broker-lib.sh
CONF=${RMQPY_CLASSIC_CONF:-conf/classic}
mkdir -p "$RUN"
for name in broker-a broker-a-s; do
  launch "$name" "$CONF/$name.conf"
done
if ! "$PY" scripts/wait_brokers.py --timeout "${RMQPY_START_TIMEOUT:-30}" "${brokers[@]}"; then
  echo "the classic pair did not start; stop what runs with scripts/classic-stop.sh" >&2
  exit 1
fi
all=$(IFS=,; echo "${addrs[*]}")
"$PY" -m broker.cli.mqadmin clusterList -b "$all"
