"""DLedgerRoleChangeHandler: DLedger leader -> broker master, follower/candidate -> broker slave.

Rules (RocketMQ ``broker/dledger/DLedgerRoleChangeHandler.java``, reference §4.7-4.8, DESIGN §5):
- The handler listens to the DLedger server's role changes and applies them **serially on one
  asyncio task**; a burst of changes is coalesced to the newest one (an older LEADER event is
  moot once a FOLLOWER event follows it). One log line per applied change.
- LEADER(term): wait until the log is committed and dispatched (``ledger end index ==
  committed index`` and ``dispatch behind bytes == 0``) and the queue offsets are rebuilt from
  the ConsumeQueues (``recover_topic_queue_table``, so the new master continues each queue
  exactly where the committed log ends). The DLedgerCommitLog performs that catch-up on its own
  loop (it must, to serialise it with its put path) and reports it as "leader ready" for the
  term; the handler waits for that report, woken by the leader-ready listener and polling every
  ``poll_s`` as a fallback. The wait is aborted as soon as this node is no longer the leader of
  that term (or a newer event is queued). Then ``change_to_master(SYNC_MASTER)`` with brokerId
  0: writes are accepted from here. The wait is bounded by ``leader_wait_timeout_s``: a leader
  that cannot catch up (dispatch stuck, store broken) does not sit on the group refusing
  writes; it hands leadership to the most caught-up follower and stays a slave (if no follower
  can take over, it keeps waiting).
- FOLLOWER / CANDIDATE: ``change_to_slave(int(selfId[1:]) + 1, leader's HTTP API address)``.
  Writes are refused with ``NOT_MASTER`` carrying that address (``None`` while no leader is
  known); SlaveSynchronize is retargeted to the leader and triggered at once, so metadata JSON
  files (topics, offsets, ...) follow the leader. A candidate that is already a slave keeps its
  brokerId and only forgets the leader's address (Apache: "CANDIDATE: if not SLAVE, changeToSlave").
- Each peer's HTTP API address comes from ``dLegerPeersHttp`` (``n0-127.0.0.1:30911;...``); this
  node's own address is always known.
- No classic HA service runs in this mode (the controller does not start one).
- A member that stops itself (``DLedgerServer.fatal_error`` set, or ``stopped`` without the
  broker asking) is reported to the controller within ``poll_s * 10`` by a watcher task
  (``BrokerController.member_stopped``: unhealthy, reads and writes refused, then exit; see the
  controller's rules for why it exits rather than restarting the member). Polling two plain
  attributes keeps ``dledger/server.py`` free of broker hooks.
- A member whose term is exhausted and that knows no leader (``DLedgerServer.terms.cannot_elect()``,
  issue 23.2: its group cannot elect until ``dledger reset-term`` is run on every stopped member)
  is reported by the same watcher as the controller's ``member_failure`` *without* stopping the
  broker: ``/health`` answers 503 with "cannot elect a leader: ... term exhausted ..." and the
  recovery, ``/status`` says unhealthy, writes stay refused (they were: no master); reads keep
  working. A later real stop of the member still stops the broker; a SIGTERM exits 0 (the
  exhausted term is on disk, so the next start reports it again).
- The broker role follows the Raft role within a second even when the DLedger loop does not run
  (issue 24.7: a leader whose loop waits on a slow disk stayed master 8-10 s after the group
  elected another leader, because the role change is only noticed by that loop). The watcher,
  on the broker loop, demotes a master **at once** (``change_to_slave``, no leader known) when
  the member is no longer LEADER (read directly, not waiting for the listener), or its leader
  lease lapsed: the DLedger loop has not ticked, or no majority (itself included) has sent it a
  message, for ``dLegerElectionTimeoutMs``'s upper bound (after that another leader may exist; the
  lower bound would trip on the 100-300 ms loop delays a loaded machine shows). One WARNING
  line names the cause. When the lease holds again (on three checks in a row, so a step-down
  in progress is not mistaken for a recovery) and the member still leads the same term, the
  LEADER event is re-posted: promotion still waits for commit and dispatch as above. Demotion never waits on the DLedger loop; promotion always does.
- A member its peers refuse for a diverging configuration (the handshake's ``ident`` check: data
  or index file size, broker name; issue 24.7) and that therefore reaches no majority cannot
  serve: the watcher records it (:meth:`cannot_serve`, one ERROR line when it starts and one when
  it heals) and ``/health`` answers 503 with the peer's refusal (which names both values and the
  key) and the fix. It clears by itself once enough links connect (the operator fixed the conf and
  restarted); nothing is stopped.

Theory of operation: the handler reaches its broker through :class:`RoleHost` (the members
it uses, nothing more; the controller passes itself), so this module does not import
``broker.controller`` (issue 26). The DLedgerServer runs on the DLedgerCommitLog's own event-loop thread
("DLedgerLoop"); its role-change and leader-ready listeners are called there. They only record
``(term, role, leader_id)`` / the ready term and hop to the broker's loop with
``call_soon_threadsafe``, so nothing slow runs inside the consensus loop and every broker
object is touched on the broker's loop only. The handler task reads the newest event and
applies it. Calls into the DLedger server (status, transfer, preferred leader) are scheduled on
the DLedger loop and awaited from the broker loop.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Protocol

from broker.tasks import cancel_and_wait, wait_for
from dledger.core.codes import Code, Role

if TYPE_CHECKING:  # pragma: no cover
    from broker.api.metrics import BrokerMetrics
    from broker.slave_sync import SlaveSynchronize
    from broker.store.dledger_commitlog import DLedgerCommitLog
    from dledger.server import DLedgerServer

log = logging.getLogger("broker.role")

MASTER_ROLE = "SYNC_MASTER"


@dataclass(frozen=True)
class RoleEvent:
    term: int
    role: Role
    leader_id: Optional[str]


CONFIG_REFUSAL_FIX = ("give every member of the group the same value of the key the refusal names (in each broker's "
                      "conf), then restart the member(s) that differ; a member whose store was written with another "
                      "value keeps it (its dledger-<selfId>/identity names it)")


def _is_config_refusal(error: Optional[str]) -> bool:
    """A handshake refusal for a diverging ``ident`` (``handshake.compare_ident``'s sentence)."""
    return bool(error) and str(error).startswith("handshake rejected") and " differs: " in str(error)


def slave_broker_id(self_id: str) -> int:
    """RocketMQ: ``brokerId = Integer.parseInt(selfId.substring(1)) + 1`` (n0 -> 1, n1 -> 2)."""
    return int(self_id[1:]) + 1


def find_dledger_commitlog(store: Any) -> "DLedgerCommitLog":
    """The DLedgerCommitLog of a DLedger-mode DefaultMessageStore (with a started server)."""
    from broker.store.dledger_commitlog import DLedgerCommitLog  # noqa: WPS433 - DLedger mode only

    commitlog = getattr(store, "commitlog", None)
    if not isinstance(commitlog, DLedgerCommitLog) or commitlog.server is None:
        raise RuntimeError("enableDLegerCommitLog=true but the message store has no DLedgerCommitLog "
                           "with a DLedger server")
    return commitlog


class RoleHost(Protocol):
    """What the handler reads and changes of its broker (``BrokerController`` is one): the role,
    the two role changes, the member-failure report, the metrics and SlaveSynchronize."""

    broker_name: str
    broker_id: int
    broker_role: str
    member_failure: Optional[str]
    metrics: "BrokerMetrics"
    slave_sync: Optional["SlaveSynchronize"]

    @property
    def api_address(self) -> str: ...

    @property
    def master_api_address(self) -> Optional[str]: ...

    def is_master(self) -> bool: ...

    def change_to_master(self, role: str = ...) -> None: ...

    def change_to_slave(self, broker_id: int, master_api_address: Optional[str]) -> None: ...

    def member_stopped(self, reason: str) -> None: ...


class DLedgerRoleChangeHandler:
    def __init__(self, controller: RoleHost, commitlog: "DLedgerCommitLog", http_peers: dict[str, str], *,
                 poll_s: float = 0.01, leader_wait_timeout_s: float = 30.0) -> None:
        self.c = controller
        self.commitlog = commitlog
        assert commitlog.server is not None  # find_dledger_commitlog: a started server
        self.server: DLedgerServer = commitlog.server
        self.self_id: str = self.server.config.self_id
        self.http_peers = dict(http_peers)
        self.http_peers.setdefault(self.self_id, controller.api_address)
        self.poll_s = poll_s
        self.leader_wait_timeout_s = leader_wait_timeout_s
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._pending: Optional[RoleEvent] = None
        self._wake = asyncio.Event()
        self._ready = asyncio.Event()
        self._ready_term = -1
        self._task: Optional[asyncio.Task[None]] = None
        self._watch: Optional[asyncio.Task[None]] = None
        self.applied: Optional[RoleEvent] = None
        self.changes = 0
        self.last_change_ms = 0
        self.last_leader_wait_ms: Optional[float] = None
        self.cannot_elect: Optional[str] = None  # issue 23.2: set once, what /health reports
        self.config_refusal: Optional[str] = None  # issue 24.7: peers refuse our configuration, no majority
        cfg = self.server.config
        self.lease_s = cfg.election_timeout_max_ms / 1000  # past it, another leader may exist
        self._ticks_seen = -1
        self._ticks_at = time.monotonic()
        self._lapsed_term: Optional[int] = None  # the term whose leadership the lease check dropped
        self._lease_held = 0  # consecutive checks the lease held since it lapsed

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Register on the DLedgerCommitLog and start the handler task (call on the broker loop)."""
        self._loop = asyncio.get_running_loop()
        self.commitlog.add_role_change_listener(self._on_role_change)
        self.commitlog.add_leader_ready_listener(self._on_leader_ready)
        # the server may have reported its first role before we registered
        self._post_event(self.server.term, self.server.role, self.server.leader_id)
        if self.commitlog.leader_ready:
            self._post_ready(self.server.term)
        self._task = self._loop.create_task(self._run(), name="DLedgerRoleChangeHandler")
        self._watch = self._loop.create_task(self._watch_member(), name="DLedgerMemberWatch")
        self._register_gauges()

    def member_failure(self) -> Optional[str]:
        """Why the DLedger member stopped itself, or None while it runs."""
        reason = self.server.fatal_error
        if reason is None and self.server.stopped.is_set():
            reason = "the DLedger server stopped"
        return reason

    async def _watch_member(self) -> None:
        while True:
            reason = self.member_failure()
            if reason is not None:
                if self.cannot_elect is not None and self.c.member_failure == self.cannot_elect:
                    self.c.member_failure = None  # the real stop replaces the term report (and exits)
                self.c.member_stopped(f"{self.self_id}: {reason}")
                return
            self._report_cannot_elect()
            self._watch_config_refusal()
            self._check_lease()
            await asyncio.sleep(self.poll_s * 10)

    def _report_cannot_elect(self) -> None:
        """Issue 23.2: an exhausted term and no leader make the broker unhealthy, with the reason."""
        why = self.server.terms.cannot_elect()
        if why is None or self.cannot_elect is not None or self.c.member_failure is not None:
            return
        self.cannot_elect = f"DLedger group of broker {self.c.broker_name} cannot elect a leader: {self.self_id}: {why}"
        self.c.member_failure = self.cannot_elect
        log.critical("%s", self.cannot_elect)

    def _check_lease(self) -> None:
        """Issue 24.7: demote a master at once when its member may no longer lead (module rules)."""
        now = time.monotonic()
        ticks = self.server.counters.get("ticks", 0)
        if ticks != self._ticks_seen:
            self._ticks_seen, self._ticks_at = ticks, now
        why = self._lease_lapse(now)
        if why is not None:
            self._lease_held = 0
        if self.c.is_master():
            if why is not None:
                self._demote_now(why)
        elif self._lapsed_term is not None and why is None:
            self._lease_held += 1
            if self._lease_held < 3:  # held on 3 checks in a row (~0.2 s): no flapping at a step-down
                return
            term, self._lapsed_term = self._lapsed_term, None
            if self.server.role is Role.LEADER and self.server.term == term:
                log.info("DLedger %s: leader lease of term %d holds again; becoming master once caught up",
                         self.self_id, term)
                self._post_event(term, Role.LEADER, self.server.leader_id)

    def _lease_lapse(self, now: float) -> Optional[str]:
        """Why this member may no longer be the group's leader, or None while its lease holds."""
        srv = self.server
        if srv.role is not Role.LEADER:
            return f"the DLedger member is {srv.role.value} in term {srv.term}"
        if now - self._ticks_at > self.lease_s:
            return f"the DLedger loop has not run for {(now - self._ticks_at) * 1000:.0f} ms"
        heard = srv._heard  # noqa: SLF001 - seam: peer -> monotonic time of its last message
        quorum = srv.core.cfg.quorum
        recent = 1 + sum(1 for t in list(heard.values()) if now - t <= self.lease_s)
        if recent < quorum:
            return f"only {recent} of the {quorum} members a majority needs were heard from in the last " \
                   f"{self.lease_s * 1000:.0f} ms"
        return None

    def _demote_now(self, why: str) -> None:
        term = self.server.term
        self._lapsed_term = term if self.server.role is Role.LEADER else None
        self.c.change_to_slave(slave_broker_id(self.self_id), None)
        self.changes += 1
        self.last_change_ms = int(time.time() * 1000)
        log.warning("DLedger %s term %d: %s; broker is SLAVE brokerId %d at once (writes refused with NOT_MASTER "
                    "until a leader is known)", self.self_id, term, why, slave_broker_id(self.self_id))

    def _watch_config_refusal(self) -> None:
        """Issue 24.7: peers refusing this member's configuration, and no majority reachable."""
        peers = self.server.transport.stats().get("peers", {})
        refusals = [f"{pid}: {p['last_error']}" for pid, p in sorted(peers.items())
                    if not p.get("connected") and _is_config_refusal(p.get("last_error"))]
        reachable = 1 + sum(1 for p in peers.values() if p.get("connected"))
        why = None
        if refusals and reachable < (len(peers) + 1) // 2 + 1:
            why = (f"DLedger member {self.self_id} of broker {self.c.broker_name} cannot serve: its peers refuse its "
                   f"configuration and it reaches no majority ({reachable} of {len(peers) + 1} members): "
                   + "; ".join(refusals))
        if why is not None and self.config_refusal is None:
            log.error("%s; %s", why, CONFIG_REFUSAL_FIX)
        elif why is None and self.config_refusal is not None:
            log.warning("DLedger member %s: its peers accept its configuration again; it can serve", self.self_id)
        self.config_refusal = why

    def cannot_serve(self) -> Optional[tuple[str, str]]:
        """(reason, fix) while this member cannot serve though it runs (for ``/health``), else None."""
        why = self.config_refusal
        return (why, CONFIG_REFUSAL_FIX) if why is not None else None

    def _register_gauges(self) -> None:
        """Prometheus gauges read from plain attributes (no hop to the DLedger loop per scrape)."""
        m, srv, dl = self.c.metrics, self.server, self.commitlog.dledger_store
        assert dl is not None  # set with the server (find_dledger_commitlog: a started server)
        m.register_gauge("rocketmq_dledger_term", "Current DLedger term", lambda: [({}, srv.term)])
        m.register_gauge("rocketmq_dledger_is_leader", "1 on the DLedger leader",
                         lambda: [({"self_id": self.self_id, "leader_id": str(srv.leader_id)}, int(self.is_leader))])
        m.register_gauge("rocketmq_dledger_end_index", "Last DLedger entry index", lambda: [({}, dl.ledger_end_index)])
        m.register_gauge("rocketmq_dledger_committed_index", "Committed DLedger entry index",
                         lambda: [({}, dl.committed_index)])
        m.register_gauge("rocketmq_dledger_role_changes", "Role changes applied by the broker", lambda: [({}, self.changes)])
        # issue 13.2: stranded followers (retention/lost stores) are visible, never silent
        m.register_gauge("rocketmq_dledger_peer_behind_begin", "1 while a follower needs entries below the leader's "
                         "begin index (retention removed them; it is reset to the leader's first entry)",
                         lambda: [({"peer": v.peer}, int(v.behind_begin)) for v in srv.core.status().peers])
        m.register_gauge("rocketmq_dledger_peer_resets_total", "Follower progress resets on this leader: kind=hint (its "
                         "log was shorter than acknowledged), kind=begin (reset to our begin index)",
                         lambda: [({"peer": v.peer, "kind": k}, n) for v in srv.core.status().peers
                                  for k, n in (("hint", v.hint_resets), ("begin", v.begin_resets))], kind="counter")
        m.register_gauge("rocketmq_dledger_begin_resets_total", "Times this member's log was reset to a leader's begin "
                         "index", lambda: [({}, srv.counters.get("begin_resets", 0))], kind="counter")
        m.register_gauge("rocketmq_dledger_loop_stalls_total", "Ticks of the DLedger loop more than 100 ms late (no "
                         "heartbeat sent or seen meanwhile; issue 22.3)",
                         lambda: [({}, srv.counters.get("loop_stalls", 0))], kind="counter")
        m.register_gauge("rocketmq_dledger_loop_stall_max_ms", "Longest DLedger loop stall seen",
                         lambda: [({}, srv.counters.get("loop_stall_max_ms", 0))])

    async def stop(self) -> None:
        await cancel_and_wait(self._watch)
        await cancel_and_wait(self._task)
        self._task = self._watch = None
        if self.cannot_elect is not None and self.c.member_failure == self.cannot_elect:
            self.c.member_failure = None  # an asked-for stop of a healthy process exits 0; the next start reports again

    def api_address_of(self, peer_id: Optional[str]) -> Optional[str]:
        return self.http_peers.get(peer_id) if peer_id else None

    # ------------------------------------------------------------------ events (DLedger loop thread)
    def _on_role_change(self, term: int, role: Role) -> None:
        self._hop(self._post_event, term, role, self.server.leader_id)

    def _on_leader_ready(self, term: int) -> None:
        self._hop(self._post_ready, term)

    def _hop(self, fn: Any, *args: Any) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(fn, *args)
            except RuntimeError:  # broker loop closing
                pass

    # ------------------------------------------------------------------ events (broker loop)
    def _post_event(self, term: int, role: Role, leader_id: Optional[str]) -> None:
        self._pending = RoleEvent(term, role, leader_id)
        self._wake.set()
        self._ready.set()  # wake a LEADER wait so it can notice the newer event

    def _post_ready(self, term: int) -> None:
        self._ready_term = max(self._ready_term, term)
        self._ready.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            event, self._pending = self._pending, None
            if event is None:
                continue
            try:
                await self._apply(event)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - keep handling later changes
                log.exception("applying DLedger role change %s failed", event)

    async def _apply(self, ev: RoleEvent) -> None:
        if ev.role is Role.LEADER:
            await self._become_master(ev)
            return
        was_master = self.c.is_master()
        if ev.role is Role.FOLLOWER:
            broker_id = slave_broker_id(self.self_id)
        else:  # CANDIDATE / PRE_CANDIDATE: no leader known
            broker_id = self.c.broker_id if self.c.broker_role == "SLAVE" else slave_broker_id(self.self_id)
        master = self.api_address_of(ev.leader_id) if ev.role is Role.FOLLOWER else None
        changed = was_master or self.c.broker_role != "SLAVE" or self.c.broker_id != broker_id \
            or self.c.master_api_address != master
        self.c.change_to_slave(broker_id, master)
        if master is not None and self.c.slave_sync is not None:
            self.c.slave_sync.trigger()
        if changed:
            self._record(ev)
            log.info("DLedger %s term %d %s (leader %s): broker is SLAVE brokerId %d, master API %s",
                     self.self_id, ev.term, ev.role.value, ev.leader_id, broker_id, master)

    def _still_leader(self, ev: RoleEvent) -> bool:
        return self._pending is None and self.server.role is Role.LEADER and self.server.term == ev.term

    async def _become_master(self, ev: RoleEvent) -> None:
        t0 = deadline_from = time.monotonic()
        while True:
            if not self._still_leader(ev):
                log.info("DLedger %s lost leadership of term %d while catching up; not becoming master",
                         self.self_id, ev.term)
                return
            if self._ready_term >= ev.term and self.commitlog.leader_ready:
                break
            if time.monotonic() - deadline_from > self.leader_wait_timeout_s:
                log.error("DLedger %s leader of term %d not caught up after %.0f s (commit/dispatch); "
                          "handing leadership over", self.self_id, ev.term, self.leader_wait_timeout_s)
                await self._hand_over()
                deadline_from = time.monotonic()  # still leader (nobody could take over): keep waiting
                continue
            self._ready.clear()
            try:
                await wait_for(self._ready.wait(), self.poll_s * 10)
            except asyncio.TimeoutError:
                pass
        waited = (time.monotonic() - t0) * 1000
        self.c.change_to_master(MASTER_ROLE)
        self.last_leader_wait_ms = waited
        self._record(ev)
        log.info("DLedger %s term %d LEADER: broker is %s brokerId 0 (waited %.0f ms for commit/dispatch "
                 "catch-up)", self.self_id, ev.term, MASTER_ROLE, waited)

    async def _on_dledger_loop(self, fn: Any, timeout: float = 30.0) -> Any:
        """Run ``fn()`` (awaiting it if it is a coroutine) on the DLedger loop, from the broker loop."""
        dl_loop = self.commitlog._loop  # noqa: SLF001 - seam: DLedgerCommitLog owns the loop the server runs on
        if dl_loop is None:
            raise RuntimeError("the DLedger loop is not running (the store is shut down)")

        async def call() -> Any:
            out = fn()
            return await out if asyncio.iscoroutine(out) else out

        return await wait_for(asyncio.wrap_future(asyncio.run_coroutine_threadsafe(call(), dl_loop)), timeout)

    async def _hand_over(self) -> None:
        st = await self._on_dledger_loop(self.server.status)
        for peer_id, _ in sorted((st.get("peers") or {}).items(), key=lambda kv: kv[1].get("lag", 1 << 62)):
            code = await self._on_dledger_loop(lambda p=peer_id: self.server.transfer_leadership(p))
            if code is Code.SUCCESS:
                return

    def _record(self, ev: RoleEvent) -> None:
        self.applied = ev
        self.changes += 1
        self.last_change_ms = int(time.time() * 1000)

    # ------------------------------------------------------------------ admin
    @property
    def is_leader(self) -> bool:
        return self.server.role is Role.LEADER

    @property
    def leader_id(self) -> Optional[str]:
        return self.server.leader_id

    async def transfer_leadership(self, to: str) -> dict[str, Any]:
        """``mqadmin transferLeader``: only the leader can hand over; returns the outcome."""
        code = await self._on_dledger_loop(lambda: self.server.transfer_leadership(to))
        return {"code": code.name, "ok": code is Code.SUCCESS, "from": self.self_id, "to": to,
                "term": self.server.term, "leaderId": self.server.leader_id}

    async def set_preferred_leaders(self, ids: list[str]) -> list[str]:
        """``mqadmin setPreferredLeader``: the leader hands over to a preferred peer within ~1 s.

        Runtime only (the conf key ``preferredLeaderId`` sets it at start-up)."""
        unknown = [i for i in ids if i not in self.server.peer_map]
        if unknown:
            raise ValueError(f"unknown peer id(s) {', '.join(unknown)}; peers are {', '.join(self.server.peer_map)}")

        await self._on_dledger_loop(lambda: self.server.set_preferred_leaders(ids))
        return list(ids)

    async def status(self) -> dict[str, Any]:
        failure = self.member_failure()
        if failure is not None:  # its store is closed: say so rather than read it
            return {"group": self.server.config.group, "selfId": self.self_id, "role": None, "term": self.server.term,
                    "memberStopped": failure, "apiPeers": dict(self.http_peers)}
        st = await self._on_dledger_loop(self.server.status, timeout=5.0)
        leader = st.get("leader_id")
        followers = {pid: {"matchIndex": p.get("match_index"), "lag": p.get("lag"), "state": p.get("state"),
                           "active": p.get("recent_active"), "apiAddress": self.api_address_of(pid),
                           # issue 13.2: lost-log / behind-begin resets, and "needs entries we no longer hold"
                           "hintResets": p.get("hint_resets"), "beginResets": p.get("begin_resets"),
                           "behindBegin": p.get("behind_begin")}
                     for pid, p in (st.get("peers") or {}).items()}
        dl = self.commitlog.dledger_store
        return {
            "group": st.get("group"), "selfId": self.self_id, "role": st.get("role"), "term": st.get("term"),
            "leaderId": leader, "leaderAddress": st.get("leader_addr"), "leaderApiAddress": self.api_address_of(leader),
            "beginIndex": st.get("begin_index"), "endIndex": st.get("end_index"), "endTerm": st.get("end_term"),
            "committedIndex": st.get("committed_index"), "persistedIndex": st.get("persisted_index"),
            "committedPos": dl.committed_pos if dl is not None else None,
            "pending": st.get("pending"), "transferee": st.get("transferee"),
            "dividedCommitlogOffset": self.commitlog.divided_commitlog_offset,
            "leaderReady": self.commitlog.leader_ready,
            "preferredLeaders": list(self.server.core.cfg.preferred_leaders),
            "followers": followers,
            "roleChanges": self.changes, "lastRoleChangeAt": self.last_change_ms,
            "beginResets": (st.get("counters") or {}).get("begin_resets", 0),
            "lastLeaderCatchUpMs": self.last_leader_wait_ms,
            "apiPeers": dict(self.http_peers),
        }
