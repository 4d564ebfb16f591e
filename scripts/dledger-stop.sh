#!/usr/bin/env bash
# Stops the DLedger group started by scripts/dledger-start.sh: SIGTERM to every node (clean
# shutdown: flush, checkpoint, abort file removed), waits for each to exit, SIGKILL after 20 s (the broker itself exits within shutdownTimeoutMillis + 5 s;
# past that its stacks are asked for with SIGUSR1 first, into its log).
set -uo pipefail
RUN=${RMQPY_RUN:-/tmp/rmqpy/run}
# a stale pid file may name a process that is not ours: only an mqbroker is signalled
ours() { tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -q -- "broker.cli.mqbroker -c"; }
pids=()
for n in n0 n1 n2; do
  pidfile="$RUN/dledger-$n.pid"
  [ -f "$pidfile" ] || continue
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null && ours "$pid"; then
    kill -TERM "$pid"
    pids+=("$n:$pid")
  fi
  rm -f "$pidfile"
done
for entry in "${pids[@]}"; do
  n=${entry%%:*}; pid=${entry#*:}
  for _ in $(seq 1 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "dledger-$n (pid $pid) did not stop in 20 s (a bug: see the stacks in its log); killing" >&2
    kill -USR1 "$pid" 2>/dev/null; sleep 1
    kill -KILL "$pid"
  fi
  echo "stopped dledger-$n (pid $pid)"
done
