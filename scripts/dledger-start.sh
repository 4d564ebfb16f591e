#!/usr/bin/env bash
# Starts the three-node DLedger group (conf/dledger/broker-n0.conf, -n1, -n2) in the background
# on 127.0.0.1, waits until a leader is master, and prints the group's status. Logs and pid files
# go to $RMQPY_RUN (default /tmp/rmqpy/run). Stop with scripts/dledger-stop.sh.
# Exit code 0 when every node answers and one of them is master within 30 s.
set -euo pipefail
cd "$(dirname "$0")/.."
RUN=${RMQPY_RUN:-/tmp/rmqpy/run}
CONF=${RMQPY_DLEDGER_CONF:-conf/dledger}
mkdir -p "$RUN"
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3
addrs=()
for n in n0 n1 n2; do
  conf="$CONF/broker-$n.conf"
  port=$(sed -n 's/^listenPort=\([0-9]*\).*/\1/p' "$conf")
  addrs+=("127.0.0.1:$port")
  pidfile="$RUN/dledger-$n.pid"
  if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    echo "dledger-$n already running (pid $(cat "$pidfile"))"
    continue
  fi
  nohup "$PY" -m broker.cli.mqbroker -c "$conf" >"$RUN/dledger-$n.log" 2>&1 &
  echo $! >"$pidfile"
  echo "started dledger-$n (pid $!, API http://127.0.0.1:$port, log $RUN/dledger-$n.log)"
done
all=$(IFS=,; echo "${addrs[*]}")
for _ in $(seq 1 300); do
  if "$PY" -m broker.cli.mqadmin clusterList -b "$all" 2>/dev/null | grep -q " SYNC_MASTER "; then
    "$PY" -m broker.cli.mqadmin dledgerStatus -b "$all"
    exit 0
  fi
  sleep 0.1
done
echo "no master elected within 30 s; see the logs in $RUN" >&2
"$PY" -m broker.cli.mqadmin clusterList -b "$all" >&2 || true
exit 1
