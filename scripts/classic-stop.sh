#!/usr/bin/env bash
# Stops the classic pair started by scripts/classic-start.sh (SIGTERM = clean shutdown; SIGKILL
# after 20 s, its stacks asked for first with SIGUSR1: the broker itself exits within
# shutdownTimeoutMillis + 5 s).
set -uo pipefail
RUN=${RMQPY_RUN:-/tmp/rmqpy/run}
# a stale pid file may name a process that is not ours: only an mqbroker is signalled
ours() { tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -q -- "broker.cli.mqbroker -c"; }
for name in broker-a-s broker-a; do
  pidfile="$RUN/$name.pid"
  [ -f "$pidfile" ] || continue
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null && ours "$pid"; then
    kill -TERM "$pid"
    for _ in $(seq 1 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "$name (pid $pid) did not stop in 20 s (a bug: see the stacks in its log); killing" >&2
      kill -USR1 "$pid" 2>/dev/null; sleep 1
      kill -KILL "$pid"
    fi
    echo "stopped $name (pid $pid)"
  fi
  rm -f "$pidfile"
done
