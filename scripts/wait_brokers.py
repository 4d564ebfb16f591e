"""Wait until the brokers a start script launched serve, or fail fast naming why (issue 24.8).

Rules (used by ``scripts/dledger-start.sh`` and ``scripts/classic-start.sh``):
- Each broker is given as ``NAME:PID:HOST:PORT:BROKERNAME:LOG``: the process the script started
  (or found running from its pid file), its HTTP API, the ``brokerName`` of its conf and its log.
- A broker counts as up only when *its own* process answers: ``GET /status`` on its port reports
  the same ``pid`` and ``brokerName``. Whatever else answers on the port (another group, an
  older run) is named and never taken for ours.
- A broker process that exits (or is a zombie) fails the wait at once, printing the last line of
  its log that says why (``mqbroker: ...``, else its last line): no polling until the timeout.
- ``--master`` also waits until one of them reports ``isMaster`` (the DLedger leader).
- Exit 0 when all are up (and a master exists if asked), 1 otherwise; one line per problem on
  stderr. Bounded by ``--timeout`` seconds; polls every 0.1 s.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional


@dataclass(frozen=True)
class Broker:
    name: str
    pid: int
    address: str
    broker_name: str
    log: Path

    @classmethod
    def parse(cls, text: str) -> "Broker":
        name, pid, host, port, broker_name, log = text.split(":", 5)
        return cls(name, int(pid), f"{host}:{port}", broker_name, Path(log))


def process_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, an exited child nobody reaped yet, is not running)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def why_exited(log: Path) -> str:
    """The broker's own last word: its last ``mqbroker:`` line, else the last line of its log."""
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return f"(no log at {log})"
    said = [ln for ln in lines if ln.startswith("mqbroker:")]
    return (said or lines or ["(empty log)"])[-1]


def fetch_status(address: str) -> Optional[dict[str, Any]]:
    """``/status`` of the broker at ``address``; None while nothing answers; {} when ACL refuses it."""
    try:
        with urllib.request.urlopen(f"http://{address}/status", timeout=2.0) as resp:
            return json.loads(resp.read().decode())
    except urllib.error.HTTPError as exc:
        return {} if exc.code in (401, 403) else None
    except (OSError, ValueError):
        return None


def check(b: Broker) -> tuple[bool, Optional[str]]:
    """(up, impostor): up when our own process answers; impostor names what else answers."""
    st = fetch_status(b.address)
    if st is None:
        return False, None
    if not st:  # aclEnable=true: unsigned /status refused; the port answers and our pid runs
        return True, None
    if st.get("pid") == b.pid and st.get("brokerName") == b.broker_name:
        return True, None
    return False, (f"{b.name}: {b.address} is answered by another broker (brokerName {st.get('brokerName')}, "
                   f"pid {st.get('pid')}), not by ours (brokerName {b.broker_name}, pid {b.pid})")


def wait(brokers: list[Broker], timeout: float, want_master: bool) -> int:
    deadline = time.monotonic() + timeout
    impostors: dict[str, str] = {}
    while True:
        dead = [b for b in brokers if not process_alive(b.pid)]
        if dead:
            for b in dead:
                print(f"{b.name} (pid {b.pid}) exited: {why_exited(b.log)} (log {b.log})", file=sys.stderr)
            return 1
        results = {b.name: check(b) for b in brokers}
        impostors.update({n: imp for n, (_up, imp) in results.items() if imp})
        if all(up for up, _imp in results.values()):
            if not want_master or any(_is_master(b) for b in brokers):
                return 0
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    for line in impostors.values():
        print(line, file=sys.stderr)
    missing = [b.name for b in brokers if not check(b)[0]]
    what = f"not serving: {', '.join(missing)}" if missing else "no master elected"
    print(f"{what} after {timeout:g} s; see the logs ({', '.join(str(b.log) for b in brokers)})", file=sys.stderr)
    return 1


def _is_master(b: Broker) -> bool:
    st = fetch_status(b.address)
    return bool(st and st.get("isMaster"))


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("brokers", nargs="+", help="NAME:PID:HOST:PORT:BROKERNAME:LOG")
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--master", action="store_true", help="also wait until one of them is master")
    args = p.parse_args(argv)
    return wait([Broker.parse(t) for t in args.brokers], args.timeout, args.master)


if __name__ == "__main__":
    sys.exit(main())
