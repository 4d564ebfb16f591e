"""Userspace TCP fault proxy (etcd ``pkg/proxy`` style) for every peer link of a test cluster.

Rules
-----
* One :class:`ProxyHub` runs its own asyncio loop in a daemon thread; the test thread controls it
  with plain method calls (thread-safe: they only swap immutable :class:`Fault` values or schedule
  work on the hub's loop). :meth:`ProxyHub.close` stops every listener and connection.
* A :class:`Link` listens on a free 127.0.0.1 port and forwards every accepted connection to one
  target. Its two directions are named ``"fwd"`` (client -> target, i.e. what the dialling node
  sends) and ``"rev"`` (the answers). Each direction has its own :class:`Fault`:

  - ``blackhole``: bytes are read and discarded (the connection stays open, silent: a partition
    in which packets vanish). Every connection that lost bytes is reset when the fault heals, as a
    TCP connection that died during the partition would be, so no stream resumes mid-frame.
    With ``keep_dead`` those connections are not reset: they stay silent after the heal (bytes
    read and dropped both ways, no close), as a TCP connection whose retransmission timer backed
    off to tens of seconds stays useless; only new connections carry traffic (issue 24.5).
  - ``loss`` (probability per unit): in *framed* mode (``u32be``: ``[len:4][payload]``, DLedger
    RPC) whole frames are dropped after each direction's first two frames (the handshake), so the
    stream stays valid and the peers see message loss. In byte mode (classic HA) a lost chunk
    resets the connection (what heavy loss does to TCP).
  - ``delay_ms`` + ``jitter_ms``: each unit is delivered no earlier than ``now + delay + U(0,
    jitter)`` and never before the unit read before it (order is kept, as in TCP).
* Randomness comes from a ``random.Random`` seeded per link from the hub seed, so a seed
  reproduces the drop pattern given the same traffic.
* Counters per link (forwarded/dropped units and bytes, resets) go into run reports.
* Faults per dialler (for a link many nodes dial, e.g. a controller's door every broker uses, or
  an HA port the master advertises): with :meth:`ProxyHub.identify_diallers` (node name -> pid),
  each accepted connection is attributed to the node whose process owns the dialling socket
  (Linux: the socket's inode from ``/proc/net/tcp``, then ``/proc/<pid>/fd``), and
  ``set_fault(..., source=node)`` applies to that node's connections only (a dialler that is no
  node, e.g. the test itself, is never attributed). A per-source fault overrides the link's own
  for those connections; healing it resets (or keeps dead) only them. On 127.0.0.0/8 the kernel
  picks 127.0.0.1 as every dialler's source address, so the address alone cannot tell nodes apart.
* A link may listen on a given address (``listen_host``/``listen_port``): a node that advertises
  ``<other loopback host>:<its own port>`` (e.g. ``brokerIP2`` for its ``haListenPort``) is
  reached through the proxy at that address while it listens on 127.0.0.1.

Theory of operation
-------------------
Each accepted connection is attributed to its dialler (when diallers are known) and gets an
upstream connection and two pump tasks. A pump reads, splits
into units (frames or chunks), applies the direction's current fault per unit and puts the
surviving units on a delivery queue served by a writer task that sleeps until each unit's due
time. Faults are read per unit, so a change takes effect at once on live connections.
"""
from __future__ import annotations

import asyncio
import os
import random
import socket
import struct
import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

DIRECTIONS = ("fwd", "rev")
_HDR = struct.Struct(">I")


@dataclass(frozen=True)
class Fault:
    blackhole: bool = False
    loss: float = 0.0
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    keep_dead: bool = False

    @property
    def healthy(self) -> bool:
        return not self.blackhole and self.loss == 0.0 and self.delay_ms == 0.0 and self.jitter_ms == 0.0


OK = Fault()


class _Splitter:
    """Splits a u32be length-prefixed stream into whole frames (header included)."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        self.buf += data
        out = []
        while len(self.buf) >= 4:
            n = _HDR.unpack_from(self.buf, 0)[0] + 4
            if len(self.buf) < n:
                break
            out.append(bytes(self.buf[:n]))
            del self.buf[:n]
        return out


@dataclass(eq=False)
class _Conn:
    link: "Link"
    writers: list[asyncio.StreamWriter] = field(default_factory=list)
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    frames: dict[str, int] = field(default_factory=lambda: {"fwd": 0, "rev": 0})
    dirty: bool = False
    dead: bool = False  # keep_dead: lost bytes in a partition, silent forever after the heal
    closed: bool = False
    source: Optional[str] = None  # the dialling node (ProxyHub.identify_diallers), if known

    def reset(self) -> None:
        if self.closed:
            return
        self.closed = True
        for w in self.writers:
            try:
                w.transport.abort()
            except Exception:  # noqa: BLE001 - already gone
                pass
        for t in self.tasks:
            t.cancel()
        self.link.conns.discard(self)


class Link:
    def __init__(self, hub: "ProxyHub", name: str, target: tuple[str, int], framed: bool, seed: int,
                 listen: tuple[str, int] = ("127.0.0.1", 0)) -> None:
        self.hub, self.name, self.target, self.framed, self.listen = hub, name, target, framed, listen
        self.rng = random.Random(seed)
        self.faults: dict[str, Fault] = {"fwd": OK, "rev": OK}
        self.source_faults: dict[str, dict[str, Fault]] = {}  # dialling node -> direction -> fault
        self.conns: set[_Conn] = set()
        self.port = 0
        self.stats = {"units": 0, "bytes": 0, "dropped_units": 0, "dropped_bytes": 0, "resets": 0, "accepted": 0,
                      "kept_dead": 0}
        self._server: Optional[asyncio.base_events.Server] = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, self.listen[0], self.listen[1], reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for c in list(self.conns):
            c.reset()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.stats["accepted"] += 1
        conn = _Conn(self, [writer])
        conn.source = self.hub.dialler_of(writer.get_extra_info("peername"), writer.get_extra_info("sockname"))
        self.conns.add(conn)
        try:
            up_r, up_w = await asyncio.open_connection(*self.target)
        except OSError:
            conn.reset()  # target down: the dialler sees the connection close, as with RST
            return
        conn.writers.append(up_w)
        if conn.closed:
            up_w.transport.abort()
            return
        conn.tasks = [asyncio.ensure_future(self._pump(conn, "fwd", reader, up_w)),
                      asyncio.ensure_future(self._pump(conn, "rev", up_r, writer))]

    async def _pump(self, conn: _Conn, direction: str, reader: asyncio.StreamReader,
                    writer: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()
        sender = asyncio.ensure_future(self._deliver(conn, queue, writer))
        splitter = _Splitter() if self.framed else None
        last_due = 0.0
        try:
            while True:
                data = await reader.read(1 << 16)
                if not data:
                    break
                units = splitter.feed(data) if splitter is not None else [data]
                for unit in units:
                    f = self.fault_of(conn, direction)
                    if conn.dead:
                        self.stats["dropped_units"] += 1
                        self.stats["dropped_bytes"] += len(unit)
                        continue
                    lose = f.blackhole or (f.loss > 0 and self.rng.random() < f.loss
                                           and (not self.framed or conn.frames[direction] >= 2))
                    if lose:
                        self.stats["dropped_units"] += 1
                        self.stats["dropped_bytes"] += len(unit)
                        if f.blackhole or not self.framed:
                            conn.dirty = True
                        if not f.blackhole and not self.framed:
                            self.stats["resets"] += 1
                            conn.reset()
                            return
                        continue
                    conn.frames[direction] += 1
                    self.stats["units"] += 1
                    self.stats["bytes"] += len(unit)
                    due = 0.0
                    if f.delay_ms or f.jitter_ms:
                        due = time.monotonic() + (f.delay_ms + self.rng.random() * f.jitter_ms) / 1000.0
                    last_due = max(due, last_due) if due else 0.0
                    queue.put_nowait((last_due, unit))
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            queue.put_nowait(None)
            try:
                await sender
            except asyncio.CancelledError:
                pass
            conn.reset()

    async def _deliver(self, conn: _Conn, queue: "asyncio.Queue[tuple[float, bytes] | None]",
                       writer: asyncio.StreamWriter) -> None:
        while True:
            item = await queue.get()
            if item is None:
                return
            due, unit = item
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                writer.write(unit)
                await writer.drain()
            except (OSError, RuntimeError):
                conn.reset()
                return

    def fault_of(self, conn: _Conn, direction: str) -> Fault:
        """The fault on ``conn``'s ``direction``: its dialler's, else the link's."""
        if conn.source is not None:
            own = self.source_faults.get(conn.source)
            if own is not None and direction in own:
                return own[direction]
        return self.faults[direction]

    def set(self, direction: str, fault: Fault, source: Optional[str] = None) -> None:
        """Called on the hub loop. Healing a blackhole resets the connections that lost bytes
        (with ``source``: that dialler's fault, and only its connections)."""
        if source is None:
            old = self.faults[direction]
            self.faults[direction] = fault
        else:
            own = self.source_faults.setdefault(source, {})
            old = own.get(direction, OK)
            own[direction] = fault
            if fault.healthy:
                del own[direction]
                if not own:
                    del self.source_faults[source]
        if old.blackhole and not fault.blackhole:
            for c in [c for c in self.conns if c.dirty and (source is None or c.source == source)]:
                if old.keep_dead:
                    c.dead = True
                    self.stats["kept_dead"] += 1
                    continue
                self.stats["resets"] += 1
                c.reset()


def _proc_addr(addr: tuple[str, int]) -> str:
    """``/proc/net/tcp``'s spelling of an IPv4 address: little-endian hex, ``:``, port in hex."""
    return f"{socket.inet_aton(addr[0])[::-1].hex().upper()}:{addr[1]:04X}"


def tcp_socket_inode(local: tuple[str, int], remote: tuple[str, int]) -> Optional[int]:
    """The inode of the IPv4 TCP socket bound to ``local`` and connected to ``remote`` (Linux), or None."""
    want = (_proc_addr(local), _proc_addr(remote))
    try:
        with open("/proc/net/tcp") as fh:
            next(fh, None)
            for line in fh:
                f = line.split()
                if len(f) > 9 and (f[1], f[2]) == want:
                    return int(f[9]) or None
    except (OSError, ValueError):
        return None
    return None


def node_owning_socket(inode: Optional[int], nodes: Mapping[str, Optional[int]]) -> Optional[str]:
    """The node (name -> pid) one of whose file descriptors is socket ``inode``, or None."""
    if inode is None:
        return None
    target = f"socket:[{inode}]"
    for name, pid in nodes.items():
        if pid is None:
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    return name
            except OSError:
                continue
    return None


class ProxyHub:
    """All links of one test run, served by one background event-loop thread."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.links: dict[str, Link] = {}
        self._diallers: Optional[Callable[[], Mapping[str, Optional[int]]]] = None
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="fault-proxy", daemon=True)
        self._thread.start()

    def _call(self, coro: Any, timeout: float = 10.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def add_link(self, name: str, target: tuple[str, int], framed: bool = False, *, listen_host: str = "127.0.0.1",
                 listen_port: int = 0) -> int:
        """A new link to ``target``; returns the local port to dial instead of the target (on
        ``listen_host``; ``listen_port`` 0 is a free one)."""
        link = Link(self, name, target, framed, zlib.crc32(f"{self.seed}:{name}".encode()),
                    (listen_host, listen_port))

        async def start() -> int:
            await link.start()
            return link.port

        port = self._call(start())
        self.links[name] = link
        return port

    def set_fault(self, name: str, direction: str, fault: Fault, source: Optional[str] = None) -> None:
        """``fault`` on one direction of link ``name``: for every dialler, or (``source``) for the
        connections of that node only (see :meth:`identify_diallers`)."""
        assert direction in DIRECTIONS, direction
        link = self.links[name]

        async def apply() -> None:
            link.set(direction, fault, source)

        self._call(apply())

    def heal_all(self) -> None:
        for name, link in self.links.items():
            for d in DIRECTIONS:
                if not link.faults[d].healthy:
                    self.set_fault(name, d, OK)
            for src, faults in list(link.source_faults.items()):
                for d in list(faults):
                    self.set_fault(name, d, OK, src)

    def faulty(self) -> dict[str, dict[str, Fault]]:
        """Links with a fault: ``{link: {direction: fault}}``, a dialler's as ``"<direction>@<node>"``."""
        out: dict[str, dict[str, Fault]] = {}
        for n, link in self.links.items():
            found = {d: f for d, f in link.faults.items() if not f.healthy}
            found.update({f"{d}@{src}": f for src, fs in link.source_faults.items() for d, f in fs.items()})
            if found:
                out[n] = found
        return out

    def identify_diallers(self, nodes: Callable[[], Mapping[str, Optional[int]]]) -> None:
        """From now on each accepted connection is attributed to the node (of ``nodes()``: name ->
        pid, read at each accept, so a restarted node is found by its new pid) whose process owns
        the dialling socket."""
        self._diallers = nodes

    def dialler_of(self, peer: Any, local: Any) -> Optional[str]:
        """The node whose process dialled the connection ``peer`` -> ``local`` (hub loop), or None."""
        if self._diallers is None or not peer or not local:
            return None
        return node_owning_socket(tcp_socket_inode(peer, local), self._diallers())

    def stats(self) -> dict[str, dict[str, int]]:
        return {n: dict(l.stats) for n, l in self.links.items()}

    def close(self) -> None:
        if not self.loop.is_running():
            return

        async def stop_all() -> None:
            for link in self.links.values():
                await link.stop()

        try:
            self._call(stop_all())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(5)
