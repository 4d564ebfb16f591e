#!/usr/bin/env bash
# Starts the classic pair (conf/classic/broker-a.conf master + broker-a-s.conf slave) in the
# background on 127.0.0.1. Logs and pid files go to $RMQPY_RUN (default /tmp/rmqpy/run).
# Stop with scripts/classic-stop.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
RUN=${RMQPY_RUN:-/tmp/rmqpy/run}
mkdir -p "$RUN"
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3
for name in broker-a broker-a-s; do
  pidfile="$RUN/$name.pid"
  if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    echo "$name already running (pid $(cat "$pidfile"))"
    continue
  fi
  nohup "$PY" -m broker.cli.mqbroker -c "conf/classic/$name.conf" >"$RUN/$name.log" 2>&1 &
  echo $! >"$pidfile"
  echo "started $name (pid $!, log $RUN/$name.log)"
done
# wait until both APIs answer
for addr in 127.0.0.1:10911 127.0.0.1:10921; do
  for _ in $(seq 1 100); do
    if "$PY" -m broker.cli.mqadmin clusterList -b "$addr" >/dev/null 2>&1; then break; fi
    sleep 0.1
  done
done
"$PY" -m broker.cli.mqadmin clusterList -b 127.0.0.1:10911,127.0.0.1:10921
