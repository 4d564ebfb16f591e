# Shared by the start/stop scripts (sourced, not run): launch our mqbroker processes in the
# background with pid files under $RUN, recognise them later, stop them cleanly.
# Rules: a pid file is trusted only when /proc says its pid runs "broker.cli.mqbroker -c <conf>"
# (a stale pid file may name any process); a stop is SIGTERM, then after 20 s SIGUSR1 (the
# broker writes its stacks to its log) and SIGKILL, said on stderr (the broker itself exits
# within shutdownTimeoutMillis + 5 s, so reaching that is a bug).
RUN=${RMQPY_RUN:-/tmp/rmqpy/run}
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3

# the value of key $1 in conf file $2 (the last assignment wins, as in the broker)
key() { sed -n "s/^$1=\([^ #]*\).*/\1/p" "$2" | tail -n 1; }
# is pid $1 an mqbroker (running conf $2, when given)?
ours() { tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -q -- "broker.cli.mqbroker -c ${2:-}"; }

addrs=(); brokers=()
# launch NAME CONF: start (or find running) the broker of CONF as NAME; appends to addrs/brokers
launch() {
  local name=$1 conf=$2 port pid pidfile log
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
    echo "started $name (pid $pid, API http://127.0.0.1:$port, log $log)"
  fi
  brokers+=("$name:$pid:127.0.0.1:$port:$(key brokerName "$conf"):$log")
}

# signal NAME: SIGTERM the broker of NAME's pid file (if it is ours); echoes its pid, removes the file
signal_stop() {
  local pidfile="$RUN/$1.pid" pid
  [ -f "$pidfile" ] || return 1
  pid=$(cat "$pidfile")
  rm -f "$pidfile"
  if kill -0 "$pid" 2>/dev/null && ours "$pid"; then
    kill -TERM "$pid"
    echo "$pid"
    return 0
  fi
  return 1
}

# await_stop NAME PID: wait up to 20 s for the exit, then stacks + SIGKILL (said on stderr)
await_stop() {
  local name=$1 pid=$2
  for _ in $(seq 1 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "$name (pid $pid) did not stop in 20 s (a bug: see the stacks in its log); killing" >&2
    kill -USR1 "$pid" 2>/dev/null; sleep 1
    kill -KILL "$pid"
  fi
  echo "stopped $name (pid $pid)"
}
