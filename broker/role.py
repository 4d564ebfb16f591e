"""DLedgerRoleChangeHandler: DLedger leader -> broker master, follower/candidate -> broker slave.

Rules (RocketMQ ``broker/dledger/DLedgerRoleChangeHandler.java``, reference §4.7-4.8, DESIGN §5):
- The handler listens to the DLedger server's role changes and applies them **serially on one
  asyncio task**; a burst of changes is coalesced to the newest one (an older LEADER event is
  moot once a FOLLOWER event follows it). One log line per applied change.
- LEADER(term): poll every ``poll_s`` until the log is committed and dispatched
  (``ledger end index == committed index`` and ``dispatch behind bytes == 0``; an empty log
  counts as caught up). The wait is aborted as soon as this node is no longer the leader of
  that term (or a newer event is queued). Then ``recover_topic_queue_table`` (queue offsets =
  ConsumeQueue max offsets, so the new master continues each queue exactly where the committed
  log ends) and ``change_to_master(SYNC_MASTER)`` with brokerId 0: writes are accepted from here.
  The wait is bounded by ``leader_wait_timeout_s``: a leader that cannot catch up (dispatch
  stuck, store broken) does not sit on the group refusing writes; it hands leadership to the
  most caught-up follower and stays a slave.
- FOLLOWER / CANDIDATE: ``change_to_slave(int(selfId[1:]) + 1, leader's HTTP API address)``.
  Writes are refused with ``NOT_MASTER`` carrying that address (``None`` while no leader is
  known); SlaveSynchronize is retargeted to the leader and triggered at once, so metadata JSON
  files (topics, offsets, ...) follow the leader. A candidate that is already a slave keeps its
  brokerId and only forgets the leader's address (Apache: "CANDIDATE: if not SLAVE, changeToSlave").
- Each peer's HTTP API address comes from ``dLegerPeersHttp`` (``n0-127.0.0.1:30911;...``); this
  node's own address is always known.
- No classic HA service runs in this mode (the controller does not start one).

Theory of operation: the DLedger server calls :meth:`_on_role_change` synchronously from its
drive loop; it only records ``(term, role, leader_id)`` and wakes the handler task, so nothing
slow runs inside the consensus loop. The task reads the newest event and applies it. The
LEADER wait polls cheap counters (end index, committed index, dispatch behind) rather than
subscribing to the store, because dispatch runs on its own thread.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from dledger.core.codes import Code, Role

if TYPE_CHECKING:  # pragma: no cover
    from broker.controller import BrokerController

log = logging.getLogger("broker.role")

MASTER_ROLE = "SYNC_MASTER"


@dataclass(frozen=True)
class RoleEvent:
    term: int
    role: Role
    leader_id: Optional[str]


def slave_broker_id(self_id: str) -> int:
    """RocketMQ: ``brokerId = Integer.parseInt(selfId.substring(1)) + 1`` (n0 -> 1, n1 -> 2)."""
    return int(self_id[1:]) + 1


def find_dledger_server(store: Any) -> Any:
    """The DLedgerServer inside a DLedger-mode DefaultMessageStore (its DLedgerCommitLog's)."""
    for owner in (getattr(store, "commitlog", None), store):
        for name in ("dledger_server", "server"):
            server = getattr(owner, name, None)
            if server is not None and hasattr(server, "add_role_change_listener"):
                return server
    raise RuntimeError("enableDLegerCommitLog=true but the message store has no DLedger server "
                       "(is DLedgerCommitLog selected by DefaultMessageStore?)")


class DLedgerRoleChangeHandler:
    def __init__(self, controller: "BrokerController", server: Any, http_peers: dict[str, str], *,
                 poll_s: float = 0.005, leader_wait_timeout_s: float = 30.0) -> None:
        self.c = controller
        self.server = server
        self.self_id: str = server.config.self_id
        self.http_peers = dict(http_peers)
        self.http_peers.setdefault(self.self_id, controller.api_address)
        self.poll_s = poll_s
        self.leader_wait_timeout_s = leader_wait_timeout_s
        self._pending: Optional[RoleEvent] = None
        self._wake = asyncio.Event()
        self._task: Optional[asyncio.Task[None]] = None
        self.applied: Optional[RoleEvent] = None
        self.changes = 0
        self.last_change_ms = 0
        self.last_leader_wait_ms: Optional[float] = None
        self.became_master_ms = 0

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Register on the DLedger server and start the handler task (call on the loop)."""
        self.server.add_role_change_listener(self._on_role_change)
        # the server may already have reported its first role before we registered
        self._on_role_change(self.server.term, self.server.role)
        self._task = asyncio.get_running_loop().create_task(self._run(), name="DLedgerRoleChangeHandler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    def api_address_of(self, peer_id: Optional[str]) -> Optional[str]:
        return self.http_peers.get(peer_id) if peer_id else None

    # ------------------------------------------------------------------ events
    def _on_role_change(self, term: int, role: Role) -> None:
        self._pending = RoleEvent(term, role, self.server.leader_id)
        self._wake.set()

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

    def _caught_up(self) -> tuple[bool, int, int, int]:
        end = self.server.log_view.ledger_end_index
        committed = self.server.core.committed_index
        behind = self.c.store_access.dispatch_behind_bytes() if self.c.store_access is not None else 0
        return (end == -1 or (end == committed and behind == 0)), end, committed, behind

    async def _become_master(self, ev: RoleEvent) -> None:
        t0 = time.monotonic()
        while True:
            if not self._still_leader(ev):
                log.info("DLedger %s lost leadership of term %d while catching up; not becoming master",
                         self.self_id, ev.term)
                return
            ok, end, committed, behind = self._caught_up()
            if ok:
                break
            if time.monotonic() - t0 > self.leader_wait_timeout_s:
                log.error("DLedger %s leader of term %d not caught up after %.0f s (end %d, committed %d, "
                          "dispatch behind %d bytes); handing leadership over", self.self_id, ev.term,
                          self.leader_wait_timeout_s, end, committed, behind)
                await self._hand_over()
                return
            await asyncio.sleep(self.poll_s)
        waited = (time.monotonic() - t0) * 1000
        self.c.store.recover_topic_queue_table()
        self.c.change_to_master(MASTER_ROLE)
        self.last_leader_wait_ms = waited
        self.became_master_ms = int(time.time() * 1000)
        self._record(ev)
        log.info("DLedger %s term %d LEADER: broker is %s brokerId 0 after %.0f ms of commit/dispatch "
                 "catch-up (end index %d)", self.self_id, ev.term, MASTER_ROLE, waited, end)

    async def _hand_over(self) -> None:
        peers = (self.server.status().get("peers") or {})
        best = sorted(peers.items(), key=lambda kv: kv[1].get("lag", 1 << 62))
        for peer_id, _ in best:
            code = await self.server.transfer_leadership(peer_id)
            if code is Code.SUCCESS:
                return

    def _record(self, ev: RoleEvent) -> None:
        self.applied = ev
        self.changes += 1
        self.last_change_ms = int(time.time() * 1000)

    # ------------------------------------------------------------------ admin
    async def transfer_leadership(self, to: str) -> dict[str, Any]:
        """``mqadmin transferLeader``: only the leader can hand over; returns the outcome."""
        code = await self.server.transfer_leadership(to)
        return {"code": code.name, "ok": code is Code.SUCCESS, "from": self.self_id, "to": to,
                "term": self.server.term, "leaderId": self.server.leader_id}

    def set_preferred_leaders(self, ids: list[str]) -> list[str]:
        """``mqadmin setPreferredLeader``: the leader hands over to a preferred peer within ~1 s.

        Runtime only (the conf key ``preferredLeaderId`` sets it at start-up)."""
        unknown = [i for i in ids if i not in self.server.peer_map]
        if unknown:
            raise ValueError(f"unknown peer id(s) {', '.join(unknown)}; peers are {', '.join(self.server.peer_map)}")
        setter = getattr(self.server, "set_preferred_leaders", None)
        if setter is not None:
            setter(ids)
        else:  # seam: the core's static config carries the list
            core = self.server.core
            core.cfg = dataclasses.replace(core.cfg, preferred_leaders=tuple(ids))
            self.server.config.preferred_leader_ids = ";".join(ids) or None
        return list(ids)

    def status(self) -> dict[str, Any]:
        st = self.server.status()
        leader = st.get("leader_id")
        peers = {}
        for pid, p in (st.get("peers") or {}).items():
            peers[pid] = {"matchIndex": p.get("match_index"), "lag": p.get("lag"), "state": p.get("state"),
                          "active": p.get("recent_active"), "apiAddress": self.api_address_of(pid)}
        commitlog = getattr(self.c.store, "commitlog", None)
        divided = getattr(commitlog, "divided_commitlog_offset", None)
        return {
            "group": st.get("group"), "selfId": self.self_id, "role": st.get("role"), "term": st.get("term"),
            "leaderId": leader, "leaderAddress": st.get("leader_addr"), "leaderApiAddress": self.api_address_of(leader),
            "beginIndex": st.get("begin_index"), "endIndex": st.get("end_index"), "endTerm": st.get("end_term"),
            "committedIndex": st.get("committed_index"), "persistedIndex": st.get("persisted_index"),
            "pending": st.get("pending"), "transferee": st.get("transferee"),
            "dividedCommitlogOffset": divided,
            "preferredLeaders": list(getattr(self.server.core.cfg, "preferred_leaders", ())),
            "followers": peers,
            "roleChanges": self.changes, "lastRoleChangeAt": self.last_change_ms,
            "lastLeaderCatchUpMs": self.last_leader_wait_ms,
            "apiPeers": dict(self.http_peers),
        }
