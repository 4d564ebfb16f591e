#!/usr/bin/env bash
# Starts the classic pair (conf/classic/broker-a.conf master + broker-a-s.conf slave) in the
# background on 127.0.0.1. Logs and pid files go to $RMQPY_RUN (default /tmp/rmqpy/run);
# $RMQPY_CLASSIC_CONF picks another conf dir. Stop with scripts/classic-stop.sh.
# Exit code 0 only when both of *our* processes answer on their own ports (/status names their
# pid and brokerName) within $RMQPY_START_TIMEOUT s (default 30); a broker that exits fails the
# start at once with the line its log ends on (e.g. "address already in use").
set -euo pipefail
cd "$(dirname "$0")/.."
RUN=${RMQPY_RUN:-/tmp/rmqpy/run}
CONF=${RMQPY_CLASSIC_CONF:-conf/classic}
mkdir -p "$RUN"
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3
key() { sed -n "s/^$1=\([^ #]*\).*/\1/p" "$2" | tail -n 1; }
ours() { tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -q -- "broker.cli.mqbroker -c $2"; }
addrs=(); brokers=()
for name in broker-a broker-a-s; do
  conf="$CONF/$name.conf"
  port=$(key listenPort "$conf")
  addrs+=("127.0.0.1:$port")
  pidfile="$RUN/$name.pid"; log="$RUN/$name.log"
  if [ -f "$pidfile" ] && ours "$(cat "$pidfile")" "$conf"; then
    pid=$(cat "$pidfile")
    echo "$name already running (pid $pid)"
  else
    nohup "$PY" -m broker.cli.mqbroker -c "$conf" >"$log" 2>&1 &
    pid=$!
    echo "$pid" >"$pidfile"
    echo "started $name (pid $pid, log $log)"
  fi
  brokers+=("$name:$pid:127.0.0.1:$port:$(key brokerName "$conf"):$log")
done
if ! "$PY" scripts/wait_brokers.py --timeout "${RMQPY_START_TIMEOUT:-30}" "${brokers[@]}"; then
  echo "the classic pair did not start; stop what runs with scripts/classic-stop.sh" >&2
  exit 1
fi
all=$(IFS=,; echo "${addrs[*]}")
"$PY" -m broker.cli.mqadmin clusterList -b "$all"
