"""DLedgerServer: drives the pure consensus core with the real clock, the file store and the RPC.

Rules
-----
* One asyncio event loop owns everything. The core is fed only from the loop thread; the work
  done in worker threads is the durable flush of the log (``fsync``) and the writes of
  ``currterm``/``checkpoint`` (``dledger.statewriter``), so the loop never blocks on the disk.
* The driver contract of ``dledger.core.ready`` is followed literally. For every ``Ready``:
  truncate the store, append follower entries as received, append the leader barrier (through
  the append hooks), persist the hard state (``currterm``, fsynced) **before** sending any
  message (the StateWriter's worker writes it; its gate holds this and every later message until
  the write is durable), send messages, apply the commit index to the store, complete append futures, notify
  role listeners, then ``advance``.
* Durability: entries count towards a quorum only once flushed. A dedicated flusher thread
  (``storelog.GroupFlusher``) groups every append made while the previous flush ran into the
  next one (group commit) and reports exactly the ``(ledger_end_index, ledger_end_term)`` pair
  the loop handed it, so a truncation racing the flush makes the report stale and the core
  ignores it. A failed flush stops the member (durability can no longer be promised).
* Client appends (and :meth:`DLedgerServer.append_queued`) are coalesced: every request that
  arrives in one loop iteration becomes part of one proposal and one store write
  (``dledger.coalesce``). ``append``/``append_batch`` stay synchronous, one proposal per call.
* ``append(body)`` / ``append_batch(bodies)`` are synchronous up to the local append: the
  returned :class:`AppendFuture` already carries ``index`` and ``pos`` (and ``positions`` for a
  batch) when the call returns, as RocketMQ needs ``pos + 48`` for its msgId before the quorum
  ack. The future resolves after quorum commit, or fails with :class:`DLedgerError`
  (``NOT_LEADER`` with the leader id/address, ``LEADER_PENDING_FULL``,
  ``WAIT_QUORUM_ACK_TIMEOUT``, ``LEADER_TRANSFERRING``, ``TERM_CHANGED``...). A refused append
  returns an already-failed future with ``index == pos == -1``.
* Append hooks ``hook(entry, buffer, body_offset)`` run on the leader only, after ``entry.pos``
  is known and before the bytes are written; followers receive the patched bytes.
* ``leader_barrier_body`` (DESIGN §4.1): if given, a new leader appends one entry with that body
  so earlier-term entries commit promptly under the current-term commit rule.
* Client requests (``dledger.rpc.client``) arrive on the same port with handshake role
  ``client``; see that module for operations and fields. ``serve_clients=False`` (broker-hosted
  member) refuses that role: only peers' RPCs are served.
* :meth:`DLedgerServer.start` refuses an unauthenticated door (``DLedgerConfig.check_auth``:
  a secret, or ``allow_insecure`` with every peer on loopback). Every peer message is decoded
  by ``core.messages.from_dict`` (Java-long ranges); a refused one is logged as one line naming
  the peer, the field and the value, and dropped before the core sees it.

Theory of operation
-------------------
Inputs (peer messages, ticks, proposals, flush reports) are fed to the core as they happen and a
single ``_drive`` callback, scheduled at most once per loop iteration, drains ``core.ready()``.
Because nothing between ``ready()`` and ``advance()`` awaits, no input can sneak in. The store
sits behind :class:`~dledger.storelog.StoreLog`, the core's read-only ``LogView``.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from typing import Any, Callable, Iterable, Optional, Sequence, Union

from .aio import wait_for
from .client_channel import ClientChannel
from .coalesce import AppendCoalescer, AppendFuture, Proposal, ReplySink, Sink
from .config import DLedgerConfig
from .core.codes import Code, Role
from .core.ready import AppendDecision
from .core.messages import MessageError, from_dict
from .errors import DLedgerError
from .rpc import transport as tp
from .entry import BODY_OFFSET, Buffer
from .store.file_store import MAX_ENTRY_SIZE
from .statewriter import StateWriter
from .storelog import GroupFlusher, StoreLog, open_store
from .term_guard import TermGuard

log = logging.getLogger("dledger.server")
#: a tick this late is logged and counted (``loop_stalls``): the loop did not run for that long,
#: so the core saw no messages and sent no heartbeats (issue 22.3)
STALL_REPORT_S = 0.1

RoleListener = Callable[[int, Role], None]
AppendHook = Callable[[Any, Any, int], None]


class DLedgerServer(ClientChannel):
    def __init__(
        self,
        config: DLedgerConfig,
        *,
        leader_barrier_body: Optional[Callable[[], bytes]] = None,
        seed: Optional[int] = None,
        coalesce_window_ms: float = 0.0,
        coalesce_max_entries: int = 1024,
        coalesce_max_bytes: int = 4 * 1024 * 1024,
    ) -> None:
        self.config = config.validate()
        self.peer_map = config.peer_map
        self.leader_barrier_body = leader_barrier_body
        self._rng = random.Random(seed)
        self._role_listeners: list[RoleListener] = []
        self._commit_listeners: list[Callable[[int], None]] = []
        self._pending: dict[int, Union[AppendFuture, Proposal]] = {}  # first index -> waiter(s)
        self._transfers: dict[str, asyncio.Future] = {}
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._drive_scheduled = False
        self._started = False
        self._stopping = False
        self._tasks: list[asyncio.Task] = []
        self._flusher: Optional[GroupFlusher] = None
        self._state: Optional[StateWriter] = None  # currterm/checkpoint writes off the loop (issue 13.5)
        self.fatal_error: Optional[str] = None
        self.stopped = asyncio.Event()
        self.counters = {
            # appends: entries; append_requests: append calls and client append requests;
            # append_batches: proposals = store write batches (fewer than requests when coalesced)
            "appends": 0, "append_requests": 0, "append_batches": 0, "append_refused": 0,
            "coalesced_requests": 0, "coalesce_flushes": 0, "committed_entries": 0,
            "ack_timeouts": 0, "flushes": 0, "flush_seconds": 0.0, "flush_report_seconds": 0.0,
            "flushed_entries": 0, "ticks": 0, "bad_peer_messages": 0, "role_changes": 0, "readies": 0,
            "begin_resets": 0,  # follower: log reset to the leader's begin index (issue 13.2)
            "loop_stalls": 0, "loop_stall_max_ms": 0,  # ticks more than STALL_REPORT_S late (issue 22.3)
        }
        self._heard: dict[str, float] = {}  # peer -> monotonic time of its last message (election logs)
        self.coalescer = AppendCoalescer(self, window_s=coalesce_window_ms / 1000.0,
                                         max_entries=coalesce_max_entries, max_bytes=coalesce_max_bytes)
        self.store = open_store(config)
        self.log_view = StoreLog(self.store)
        self.core = self.log_view.make_core(config, self._rng, barrier=leader_barrier_body is not None)
        self.terms = TermGuard(self.core, config.self_id)  # issue 23.2: implausible / exhausted terms
        self.transport = tp.PeerTransport(
            config.group, config.self_id, self.peer_map,
            on_peer_message=self._on_peer_message,
            on_client_request=self._on_client_request,
            secret=config.auth_token,
            identity=config.handshake_identity(),  # issue 13.7: file sizes / broker name must agree
            serve_clients=config.serve_clients,
            max_frame_size=config.max_frame_size, limits=config.port_limits(),  # issue 23.1
            **config.link_timeouts(),  # silent peers reset and redialled (24.5)
        )

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if self._started:
            return
        self.config.check_auth()  # InsecureConfigError: refuse to open an unauthenticated door
        self._loop = asyncio.get_running_loop()
        self._flusher = GroupFlusher(self.log_view, self._loop, self._on_flushed, self._on_flush_error, self.counters,
                                     name=f"dledger-flush-{self.config.self_id}")
        self._flusher.start()
        self._state = StateWriter(self.log_view, self._loop, self.transport.send,
                                  lambda exc: self._fatal(f"persisting the hard state failed: {exc}"),
                                  name=f"dledger-state-{self.config.self_id}")
        await self.transport.start()
        self._started = True
        self._tasks = [
            self._loop.create_task(self._tick_loop(), name=f"dledger-tick-{self.config.self_id}"),
            self._loop.create_task(self._checkpoint_loop(), name=f"dledger-ckpt-{self.config.self_id}"),
        ]
        self._kick()

    async def shutdown(self) -> None:
        """Stop ticking and serving, flush, write the checkpoint, close files. Idempotent."""
        if not self._started or self._stopping:
            return
        self._stopping = True
        tasks = list(self._tasks)
        while tasks:  # re-cancel: 3.11's wait_for can swallow a racing cancellation
            for t in tasks:
                t.cancel()
            _, pending = await asyncio.wait(tasks, timeout=1.0)
            tasks = list(pending)
        if self._flusher is not None:
            await asyncio.to_thread(self._flusher.stop)
        await self.transport.stop()
        err = DLedgerError(Code.INTERNAL_ERROR, "server shut down")
        self.coalescer.fail_all(err)
        for waiter in self._pending.values():
            if isinstance(waiter, Proposal):
                waiter.finish(err, self.counters)
            elif not waiter.done():
                waiter.set_exception(DLedgerError(err.code, err.message))
        self._pending.clear()
        for fut in self._transfers.values():
            if not fut.done():
                fut.set_result(Code.INTERNAL_ERROR)
        if self._state is not None:
            await asyncio.to_thread(self._state.close)  # pending currterm/checkpoint writes first
        try:
            self.log_view.close()  # flush + checkpoint + close files
        finally:
            self._started = False
            self.stopped.set()

    def _fatal(self, reason: str) -> None:
        """Stop this member: something happened that the core cannot be told about."""
        if self.fatal_error is None:
            self.fatal_error = reason
            log.critical("%s: fatal: %s; shutting down", self.config.self_id, reason)
            if self._loop is not None:
                self._loop.create_task(self.shutdown())

    # ------------------------------------------------------------------ public API
    @property
    def role(self) -> Role:
        return self.core.role

    @property
    def term(self) -> int:
        return self.core.term

    @property
    def leader_id(self) -> Optional[str]:
        return self.core.leader_id

    @property
    def is_leader(self) -> bool:
        return self.core.role is Role.LEADER

    @property
    def leader_address(self) -> Optional[str]:
        return self.config.address_of(self.leader_id)

    def add_role_change_listener(self, cb: RoleListener) -> None:
        self._role_listeners.append(cb)

    def add_commit_listener(self, cb: Callable[[int], None]) -> None:
        """``cb(committed_index)`` on this loop whenever the committed index moves (leader and
        followers alike): what a state machine applying the log waits for, without polling."""
        self._commit_listeners.append(cb)

    def add_append_hook(self, hook: AppendHook) -> None:
        self.log_view.add_append_hook(hook)

    def append(self, body: bytes) -> AppendFuture:
        """Append one entry as leader; see the module rules for the future's contract."""
        return self._append([body], batch=False)

    def append_batch(self, bodies: Iterable[bytes]) -> AppendFuture:
        """Append many entries, each its own entry; completes when the last one commits."""
        return self._append(list(bodies), batch=True)

    def append_batch_then(self, bodies: Sequence[Buffer], sink: "ReplySink") -> Union[list[int], DLedgerError]:
        """Append many entries now, as :meth:`append_batch`, and call ``sink(results, None)``
        when the last one commits, or ``sink(None, error)`` when they fail, from inside the drive
        that decides it (no future, no extra loop iteration: what a state machine embedding the
        server on its hot path wants). Returns the entries' positions, or the refusal (the
        entries were not appended; ``sink`` is never called then)."""
        out = self._admit(bodies)
        if isinstance(out, DLedgerError):
            self.counters["append_refused"] += 1
            return out
        d, positions = out
        self._track(d.first_index, Proposal(d.first_index, positions, [(sink, 0, len(bodies))]))
        return positions

    def append_queued(self, bodies: Iterable[bytes]) -> AppendFuture:
        """Append many entries like :meth:`append_batch`, coalesced with every other request
        queued in this loop iteration (``dledger.coalesce``): ``index``/``pos``/``positions``
        are set only once the batch is written (they are -1 / empty when the call returns)."""
        loop = self._loop or asyncio.get_running_loop()
        fut = AppendFuture(loop=loop)
        fut.batch = True
        bodies = list(bodies)
        bad = self._check_request(bodies)
        if bad is not None:
            return self._refuse(fut, *bad)
        if not self._started or self._stopping or self.fatal_error:
            return self._refuse(fut, Code.LEADER_NOT_READY, "server not running")
        self._enqueue(bodies, fut)
        return fut

    def _check_request(self, bodies: Sequence[Buffer]) -> Optional[tuple[Code, str]]:
        """Per-request checks (no state): empty request, oversize entry."""
        if not bodies:
            return Code.REQUEST_WITH_EMPTY_BODYS, "no bodies"
        for b in bodies:
            if BODY_OFFSET + len(b) > MAX_ENTRY_SIZE:
                return (Code.UNEXPECTED_ARGUMENT,
                        f"entry of {BODY_OFFSET + len(b)} bytes exceeds the {MAX_ENTRY_SIZE}-byte limit")
        return None

    def _enqueue(self, bodies: list[bytes], sink: Sink) -> None:
        self.counters["append_requests"] += 1
        self.counters["coalesced_requests"] += 1
        self.coalescer.submit(bodies, sum(map(len, bodies)), sink)

    def _propose_write(self, bodies: Sequence[Buffer]) -> Union[tuple[AppendDecision, list[int]], DLedgerError]:
        """Reserve indexes in the core and write the entries (hooks run); or the refusal."""
        if not self._started or self._stopping or self.fatal_error:
            return DLedgerError(Code.LEADER_NOT_READY, "server not running")
        if self.log_view.store.disk_full:
            return DLedgerError(Code.DISK_FULL, "store is full")
        d = self.core.propose(len(bodies))
        if d.code is not Code.SUCCESS:
            leader = (d.leader_id or self.leader_id) if d.code is Code.NOT_LEADER else None
            return DLedgerError(d.code, f"{self.config.self_id} cannot append", leader, self.config.address_of(leader))
        try:
            positions = self.log_view.append_as_leader(bodies, d.first_index, d.term)
        except AssertionError as exc:  # store and core disagree about the log: a bug, stop
            self._fatal(f"local append of {d.first_index}..{d.last_index}: {exc}")
            return DLedgerError(Code.DISK_ERROR, f"local append failed: {exc}")
        except Exception as exc:
            # The store left no trace (it rolls a failed batch back); the core takes the
            # indexes back, so the member keeps serving (e.g. after freeing disk space).
            try:
                self.core.abandon_proposal(d)
            except RuntimeError as bug:  # cannot happen: nothing ran since propose()
                self._fatal(f"local append of {d.first_index}..{d.last_index} failed ({exc}) and {bug}")
            log.warning("%s: local append of %d entries failed: %s", self.config.self_id, len(bodies), exc)
            code = Code.DISK_FULL if self.log_view.store.disk_full else Code.DISK_ERROR
            return DLedgerError(code, f"local append failed: {exc}")
        self.counters["appends"] += len(bodies)
        self.counters["append_batches"] += 1
        return d, positions

    def _after_appends(self) -> None:
        if self._flusher is None or not self._started:
            return
        self._flusher.request()
        if not self._drive_scheduled:
            self._drive()  # push the new entries in this iteration, not the next

    def _propose_group(self, bodies: list[bytes], members: list[tuple[Sink, int, int]]) -> None:
        """One proposal for the requests in ``members`` (called by the coalescer's flush)."""
        out = self._propose_write(bodies)
        if isinstance(out, DLedgerError):
            self.counters["append_refused"] += len(members)
            Proposal(-1, [], members).finish(out, self.counters)
            return
        d, positions = out
        group = Proposal(d.first_index, positions, members)
        for sink, off, n in members:
            if isinstance(sink, AppendFuture):
                sink.index, sink.last_index = d.first_index + off, d.first_index + off + n - 1
                sink.positions = positions[off:off + n]
                sink.pos = sink.positions[0]
        self._pending[d.first_index] = group

    def _append(self, bodies: list[bytes], batch: bool) -> AppendFuture:
        loop = self._loop or asyncio.get_running_loop()
        fut = AppendFuture(loop=loop)
        fut.batch = batch
        out = self._admit(bodies)
        if isinstance(out, DLedgerError):
            return self._refuse(fut, out.code, out.message, out.leader_id)
        d, positions = out
        fut.index, fut.last_index, fut.positions = d.first_index, d.last_index, positions
        fut.pos = positions[0]
        self._track(d.first_index, fut)
        return fut

    def _admit(self, bodies: Sequence[Buffer]) -> Union[tuple[AppendDecision, list[int]], DLedgerError]:
        """What every direct append shares: the per-request checks, then propose and write."""
        bad = self._check_request(bodies)
        if bad is not None:
            return DLedgerError(bad[0], bad[1])
        self.counters["append_requests"] += 1
        return self._propose_write(bodies)

    def _track(self, first_index: int, waiter: Union[AppendFuture, Proposal]) -> None:
        """Wait for the commit of what was just written: flush it, drive it out."""
        self._pending[first_index] = waiter
        self._flusher.request()  # type: ignore[union-attr]
        self._kick()

    def _refuse(self, fut: AppendFuture, code: "Code | int", msg: str, leader_id: Optional[str] = None) -> AppendFuture:
        self.counters["append_refused"] += 1
        code = Code(code)  # a DLedgerError carries a plain int; ``is`` below needs the member
        fut.code = code
        addr = self.config.address_of(leader_id) if code is Code.NOT_LEADER else None
        fut.set_exception(DLedgerError(code, msg, leader_id if code is Code.NOT_LEADER else None, addr))
        fut.exception()  # mark retrieved: a refused future nobody awaits is not an error
        return fut

    def set_preferred_leaders(self, ids: Sequence[str]) -> None:
        """Runtime ``preferredLeaderIds`` (on this server's loop): the core hands over to them."""
        self.core.cfg = dataclasses.replace(self.core.cfg, preferred_leaders=tuple(ids))
        self.config.preferred_leader_ids = ";".join(ids) or None

    async def transfer_leadership(self, to_id: str, timeout: Optional[float] = None) -> Code:
        """Ask the core to hand leadership to ``to_id``; returns SUCCESS or the failure code."""
        if to_id not in self.peer_map:
            return Code.UNKNOWN_MEMBER
        if to_id == self.config.self_id and self.is_leader:
            return Code.SUCCESS
        if not self.is_leader:
            return Code.NOT_LEADER
        code = self.core.transfer_leadership(to_id)
        if code is not None and code is not Code.SUCCESS:
            return code
        fut = self._transfers.get(to_id)
        if fut is None or fut.done():
            fut = self._loop.create_future()  # type: ignore[union-attr]
            self._transfers[to_id] = fut
        self._kick()
        wait = timeout if timeout is not None else 3 * (self.config.election_timeout_max_ms +
                                                        self.config.leadership_transfer_wait_timeout_ms) / 1000
        try:
            return await wait_for(asyncio.shield(fut), wait)
        except asyncio.TimeoutError:
            return Code.TAKE_LEADERSHIP_FAILED

    def status(self) -> dict[str, Any]:
        st = self.core.status()
        peers = {
            p.peer: {"match_index": p.match_index, "next_index": p.next_index, "lag": p.lag, "state": p.state,
                     "inflight": p.inflight, "recent_active": p.recent_active,
                     # lost-log resets, begin resets sent, and "needs entries below our begin"
                     "hint_resets": p.hint_resets, "begin_resets": p.begin_resets,
                     "behind_begin": p.behind_begin}
            for p in st.peers
        }
        return {
            "group": self.config.group, "self_id": self.config.self_id, "terms": self.terms.status(),
            "role": st.role.dledger_name() if hasattr(st.role, "dledger_name") else st.role.value,
            "term": st.term,
            "leader_id": st.leader_id, "leader_addr": self.config.address_of(st.leader_id),
            "vote": st.vote,
            "begin_index": self.log_view.ledger_begin_index,
            "end_index": self.log_view.ledger_end_index,
            "end_term": self.log_view.ledger_end_term,
            "committed_index": st.committed_index,
            "persisted_index": st.persisted_index,
            "pending": st.pending,
            "transferee": st.transferee,
            "peers": peers,
            "counters": dict(self.counters),
            "transport": self.transport.stats(),
            "state_writer": dict(self._state.counters) if self._state is not None else {},  # issue 13.5
        }

    # ------------------------------------------------------------------ the drive loop
    def _kick(self) -> None:
        if not self._drive_scheduled and self._loop is not None:
            self._drive_scheduled = True
            self._loop.call_soon(self._drive)

    def _drive(self) -> None:
        self._drive_scheduled = False
        if not self._started or self.fatal_error:
            return
        core = self.core
        while core.has_ready():
            rd = core.ready()
            self.counters["readies"] += 1
            try:
                self._handle_ready(rd)
            except Exception as exc:  # store refused what the core decided: logs would diverge
                log.exception("%s: applying a Ready failed", self.config.self_id)
                self._fatal(f"applying a Ready failed: {exc}")
                return
            core.advance(rd)

    def _handle_ready(self, rd: Any) -> None:
        lv = self.log_view
        wrote = False
        entries = rd.entries
        if rd.reset_begin is not None:  # behind the leader's begin index: restart the log there
            lv.reset_begin(entries)
            self.counters["begin_resets"] += 1
            entries, wrote = [], True
        if rd.truncate_from is not None:
            lv.truncate(rd.truncate_from)
            wrote = True
        if entries:
            lv.append_as_follower(entries)
            wrote = True
        if rd.append_barrier is not None:
            d = rd.append_barrier
            body = self.leader_barrier_body() if self.leader_barrier_body else b""
            lv.append_as_leader([body], d.first_index, d.term)
            wrote = True
        if rd.hard_state is not None:
            self._state.persist_hard_state(rd.hard_state.term, rd.hard_state.vote)  # type: ignore[union-attr]
        if wrote:
            self._flusher.request()  # type: ignore[union-attr]
        send = self._state.send  # type: ignore[union-attr]  # held until the hard state is durable
        for m in rd.messages:
            send(m.dst, m.to_dict())
        if rd.committed_index is not None:
            lv.update_committed_index(self.core.status().term if rd.role_change is None else rd.role_change.term,
                                      rd.committed_index)
            for listener in self._commit_listeners:
                try:
                    listener(rd.committed_index)
                except Exception:  # noqa: BLE001 - a listener must not stop the log
                    log.exception("%s: commit listener failed", self.config.self_id)
        for c in rd.completions:
            self._complete(c)
        if rd.role_change is not None:
            self._role_changed(rd.role_change)
        if rd.transfer_result is not None:
            to, code = rd.transfer_result
            fut = self._transfers.pop(to, None)
            if fut is not None and not fut.done():
                fut.set_result(code)

    def _complete(self, c: Any) -> None:
        waiter = self._pending.pop(c.first_index, None)
        if waiter is None:
            return
        if c.code is Code.SUCCESS:
            self.counters["committed_entries"] += c.last_index - c.first_index + 1
            if isinstance(waiter, Proposal):
                waiter.finish(None, self.counters)
            elif not waiter.done():
                waiter.set_result(waiter.results() if waiter.batch else (waiter.index, waiter.pos))
            return
        if c.code is Code.WAIT_QUORUM_ACK_TIMEOUT:
            self.counters["ack_timeouts"] += 1
        leader = self.leader_id if c.code is Code.NOT_LEADER else None
        err = DLedgerError(c.code, f"append of index {c.first_index}..{c.last_index} term {c.term}",
                           leader, self.config.address_of(leader))
        if isinstance(waiter, Proposal):
            waiter.finish(err, self.counters)
        elif not waiter.done():
            waiter.code = c.code
            waiter.set_exception(err)

    def _role_changed(self, rc: Any) -> None:
        self.counters["role_changes"] += 1
        if rc.role is not Role.FOLLOWER or rc.leader_id is not None:
            log.info("%s: role %s term %d leader %s", self.config.self_id, rc.role.value, rc.term, rc.leader_id)
        if rc.role is Role.PRE_CANDIDATE or (rc.role is Role.CANDIDATE and not self.config.pre_vote):
            now = time.monotonic()
            heard = ", ".join(f"{p} {1000 * (now - t):.0f} ms ago" for p, t in sorted(self._heard.items()))
            log.info("%s: election timeout; last message from each peer: %s", self.config.self_id, heard or "none")
        for cb in list(self._role_listeners):
            try:
                cb(rc.term, rc.role)
            except Exception:
                log.exception("%s: role change listener failed", self.config.self_id)

    # ------------------------------------------------------------------ inputs
    def _on_peer_message(self, src: str, payload: Any) -> None:
        if self._stopping or self.fatal_error:
            return
        try:
            msg = from_dict(payload)
        except MessageError as exc:  # e.g. a term no Java long holds: never reaches the core
            self.counters["bad_peer_messages"] += 1
            log.warning("%s: dropped a message from peer %s: %s", self.config.self_id, src, exc)
            return
        if msg.src != src or msg.dst != self.config.self_id:
            # the handshake authenticated `src`; a frame may not claim another sender
            self.counters["bad_peer_messages"] += 1
            log.warning("%s: dropped a %s from peer %s claiming src=%r dst=%r", self.config.self_id,
                        type(msg).__name__, src, msg.src, msg.dst)
            return
        self._heard[src] = time.monotonic()
        self.terms.step(msg)
        self._kick()

    async def _tick_loop(self) -> None:
        loop = asyncio.get_running_loop()
        period = self.config.tick_ms / 1000.0
        next_at = loop.time() + period
        while True:
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            now = loop.time()
            due = 1 + int((now - next_at) / period)
            # A stalled loop catches up a little, but never fires a burst of election timeouts.
            if self.fatal_error:
                return
            late = now - next_at
            if late > STALL_REPORT_S:
                self.counters["loop_stalls"] += 1
                self.counters["loop_stall_max_ms"] = max(self.counters["loop_stall_max_ms"], round(late * 1000))
                log.warning("%s: the DLedger loop was %.0f ms late for a tick (role %s)", self.config.self_id,
                            late * 1000, self.core.role.name)
            for _ in range(min(due, 3)):
                self.core.tick()
                self.counters["ticks"] += 1
            next_at = max(next_at + due * period, now)
            self._kick()

    def _on_flushed(self, end_index: int, end_term: int, t_done: float) -> None:
        """Loop thread: the flusher made everything up to ``(end_index, end_term)`` durable."""
        self.counters["flush_report_seconds"] += time.perf_counter() - t_done
        if not self._started or self._stopping or self.fatal_error:
            return
        self.core.on_persisted(end_index, end_term)
        if not self._drive_scheduled:
            self._drive()  # acks / commits go out in this iteration

    def _on_flush_error(self, exc: BaseException) -> None:
        self._fatal(f"flush failed: {exc}")

    async def _checkpoint_loop(self) -> None:
        period = self.config.checkpoint_interval_ms / 1000.0
        while True:
            await asyncio.sleep(period)
            try:
                await self._state.checkpoint()  # type: ignore[union-attr]  # in the state writer's thread
            except OSError:
                log.exception("%s: checkpoint write failed", self.config.self_id)
