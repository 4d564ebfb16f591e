"""Local child processes made easy: free 127.0.0.1 ports, ``.conf`` files from templates, polling.

Used by the upgrade demo (``tools/demo_procs.py``), the benchmarks (``bench/``) and the tests,
which all start real ``mqbroker`` / DLedger processes; in ``tools/`` (not packaged, issue 26.7)
rather than the test tree because bench and demo must run without the tests.

Rules:
- Ports are 127.0.0.1 ports the kernel just handed out (bound, then released); a group of ports
  that must keep a fixed distance (listenPort, listenPort+1 for HA, ...) is checked as a whole
  (:func:`port_with_offsets`). Another process may take a port before the child binds it; that
  race is accepted (the child then fails to start and says so). Two processes using this module
  (a CI run and a developer's pytest on one machine) draw from disjoint lanes of the pool.
- :func:`write_conf` copies a ``.conf`` template with keys replaced in place (commented lines
  are left alone) or appended; RocketMQ key names.
- :func:`wait_until` polls a predicate until it returns something truthy, and raises ``error``
  (``TimeoutError`` by default; the demo passes its own) naming what it waited for and the last
  value; ``check`` runs before each poll and may raise (a child died).
- A broker asked to stop exits within :data:`SHUTDOWN_BOUND_S` (issue 21): every harness that
  stops one waits with :func:`wait_exit`, which past the bound asks the process for its stacks
  (SIGUSR1, into its log), kills it and raises :class:`ShutdownTooSlow` naming it; nobody waits
  on a stop silently or SIGKILLs a hung broker without saying so.
"""
from __future__ import annotations

import fcntl
import itertools
import os
import random
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional, TypeVar

REPO = Path(__file__).resolve().parents[1]
T = TypeVar("T")

# mqbroker's shutdownTimeoutMillis (10 s) + its exit watchdog's grace (5 s) + slack for a loaded machine
SHUTDOWN_BOUND_S = 20.0


class ShutdownTooSlow(AssertionError):
    """A signalled broker did not exit within the bound (its stacks are in its log)."""


def wait_exit(proc: "subprocess.Popen[bytes]", name: str, bound: float = SHUTDOWN_BOUND_S,
              log: Callable[[], str] = lambda: "") -> int:
    """Exit code of a signalled ``proc``; past ``bound`` s: stacks (SIGUSR1), SIGKILL, raise."""
    try:
        return proc.wait(bound)
    except subprocess.TimeoutExpired:
        pass
    try:
        proc.send_signal(signal.SIGUSR1)  # mqbroker dumps every thread's and task's stack to its log
        time.sleep(1.0)
    except ProcessLookupError:
        pass
    proc.kill()
    proc.wait(10)
    raise ShutdownTooSlow(f"{name} (pid {proc.pid}) did not exit within {bound:.0f} s of its stop signal; "
                          f"stacks and log tail:\n{log()}")


# ---- ports --------------------------------------------------------------------------------------
def _port_pool() -> range:
    """Ports no outgoing connection of this machine can take: below the kernel's ephemeral range.

    A port the OS hands out for ``bind(0)`` lies *in* the ephemeral range, so between the moment a
    test picks it and the moment its broker binds it, any outgoing connection (a DLedger peer
    dialling, a name-server registration, a forwarded send) may be given it as its local port: the
    broker then fails with EADDRINUSE (seen in CI: n1 of a fault-test group). Ports below the range
    are only ever bound on purpose."""
    try:
        lo, hi = (int(v) for v in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        lo, hi = 32768, 60999
    if lo - 100 - 10_000 >= 4_000:
        return range(10_000, lo - 100)
    return range(hi + 1, 65_000) if 65_000 - hi > 4_000 else range(20_000, 30_000)


_POOL = _port_pool()
#: ports handed out are this far apart: callers derive neighbours (listenPort+1 for HA, the demo's
#: +10/+11), which a later pick must never be handed
_STRIDE = 32
_SLOTS = len(_POOL) // _STRIDE
#: the pool is cut into this many lanes; a process holds one lane (an ``flock`` on a file under
#: the temp dir, which the kernel drops when the process ends, even on kill -9), so two test runs
#: on one machine (a CI run and a developer's pytest) never hand out the same port
_LANES = 4
#: ``RMQPY_PORT_LANE_DIR`` names another lane directory (the lane tests give their children a
#: private one, so lanes other test runs on the machine hold do not change what they see)
_LANE_DIR = Path(os.environ.get("RMQPY_PORT_LANE_DIR") or Path(tempfile.gettempdir()) / "rocketmq-py-port-lanes")
_lane_fd: Optional[int] = None
_lane: Optional[range] = None
_cursor: Optional[Iterator[tuple[int, int]]] = None


def _claim_lane() -> range:
    """Slot numbers of the lane this process holds; all slots when every lane is taken."""
    global _lane
    if _lane is None:
        _lane = _take_lane()
    return _lane


def _take_lane() -> range:
    global _lane_fd
    try:
        _LANE_DIR.mkdir(exist_ok=True)
        for lane in range(_LANES):
            fd = os.open(_LANE_DIR / f"lane-{lane}", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            _lane_fd = fd  # held until the process ends
            per = _SLOTS // _LANES
            return range(lane * per, (lane + 1) * per)
    except OSError:
        pass
    return range(_SLOTS)


def _slots() -> Iterator[tuple[int, int]]:
    """(lap, slot) from a per-process cursor over this process's lane, from a random start: a port
    handed out is not handed out again until the whole lane went round (then the next lap is
    shifted by 5), so two picks of one test never collide."""
    lane = _claim_lane()
    for i in itertools.count(random.randrange(len(lane))):
        lap, k = divmod(i, len(lane))
        yield lap, lane[k]


def _next_port() -> int:
    global _cursor
    if _cursor is None:
        _cursor = _slots()
    lap, slot = next(_cursor)
    return _POOL.start + (slot * _STRIDE + (lap * 5) % _STRIDE) % len(_POOL)


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports outside the ephemeral range (all bound at once, then released)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(len(_POOL)):
            if len(socks) == n:
                break
            port = _next_port()
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            socks.append(s)
        if len(socks) < n:
            raise RuntimeError(f"no {n} free 127.0.0.1 ports in {_POOL.start}-{_POOL.stop - 1}")
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port() -> int:
    return free_ports(1)[0]


def _bindable(port: int) -> bool:
    if not 1024 < port < 65535:
        return False
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def port_with_offsets(offsets: Iterable[int], avoid: Iterable[int] = (),
                      error: Callable[[str], Exception] = RuntimeError) -> int:
    """A free port ``p`` with ``p + d`` free for every ``d`` in ``offsets`` and none in ``avoid``."""
    offs, bad = sorted(set(offsets) | {0}), set(avoid)
    for _ in range(500):
        p = free_port()
        cand = [p + d for d in offs]
        if not bad.intersection(cand) and all(_bindable(c) for c in cand):
            return p
    raise error(f"no free 127.0.0.1 ports at offsets {offs}")


def port_pair() -> int:
    """A port p with p and p+1 free (listenPort and haListenPort = listenPort + 1)."""
    return port_with_offsets((1,))


# ---- conf files ---------------------------------------------------------------------------------
def write_conf(template: Path, out: Path, overrides: dict[str, Any], header: Optional[str] = None) -> Path:
    """Copy a ``.conf`` template with keys replaced (in place) or appended; RocketMQ key names."""
    lines, seen = [], set()
    if header:
        lines += [f"# {h}" for h in header.splitlines()]
    for line in template.read_text(encoding="utf-8").splitlines():
        key = line.split("=", 1)[0].strip()
        if key in overrides and not line.lstrip().startswith("#"):
            lines.append(f"{key}={overrides[key]}")
            seen.add(key)
        else:
            lines.append(line)
    lines += [f"{k}={v}" for k, v in overrides.items() if k not in seen]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


# ---- waiting ------------------------------------------------------------------------------------
def wait_until(predicate: Callable[[], Optional[T]], timeout: float, what: str, interval: float = 0.05,
               check: Optional[Callable[[], None]] = None,
               error: Callable[[str], Exception] = TimeoutError) -> T:
    """Poll ``predicate`` until it returns something truthy; ``check`` may raise (a child died)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        if check is not None:
            check()
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise error(f"timed out after {timeout:g}s waiting for {what} (last: {last!r})")
