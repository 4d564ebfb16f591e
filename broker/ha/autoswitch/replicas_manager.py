"""Apache RocketMQ 5.3.3's broker ``ReplicasManager`` (Controller mode), sans-I/O: a deterministic
state machine that registers the broker with the controller, keeps its heartbeats, and says when
the broker becomes master or slave. No I/O, no clock, no randomness: events in (with the time),
actions out (:mod:`broker.ha.autoswitch.replicas_messages`).

States (Apache's ``State``), each entered only through :data:`NEXT_STATE`:

- ``INITIAL``: ask the controllers, one address after the other, ``CONTROLLER_GET_METADATA_INFO``
  until one names the leader (``controllerLeaderAddress``); a round with no leader is retried
  after ``metadata_retry_ms`` (then ``FIRST_TIME_SYNC_CONTROLLER_METADATA_DONE``).
- ``FIRST_TIME_SYNC_CONTROLLER_METADATA_DONE``: the register sequence (``RegisterState``), whose
  step is chosen from what is on disk (:data:`ON_DISK`, persistent_unique_broker_id.md):

  ========================  =============  ==============================================
  brokerIdentity            -temp          meaning, next step
  ========================  =============  ==============================================
  absent                    absent         nothing negotiated: ``CONTROLLER_GET_NEXT_BROKER_ID``
  absent                    present        an id being applied for (the controller may already
                                           have granted it): ``CONTROLLER_APPLY_BROKER_ID`` again
                                           with the same id and check code
  present                   any            the id is ours: ``CONTROLLER_REGISTER_BROKER``
  ========================  =============  ==============================================

  The order of the writes makes every crash point one of these rows: the temp file is durable
  before ``CONTROLLER_APPLY_BROKER_ID`` is sent; ``brokerIdentity`` is written only after the
  controller granted the id, and the temp file is cleared only after that (a crash between the two
  leaves both: ``brokerIdentity`` wins, the temp file is then cleared). A file whose cluster or
  broker name is not the configured one stops the sequence (a :class:`Problem`, retried, as Apache
  does). A definite refusal of the applied id (any answer but SUCCESS, ``CONTROLLER_NOT_LEADER``
  and no answer) clears the temp file and starts again from ``GET_NEXT_BROKER_ID``. Once
  ``brokerIdentity`` is written the broker id never changes.
  A failed attempt is retried after ``register_backoff_ms``; after ``register_attempts`` failed
  attempts, after ``retry_interval_ms`` (Apache's startBasicService retry).
- ``REGISTER_TO_CONTROLLER_DONE``: heartbeat once; if the register answer named a master,
  ``RUNNING``; else ``CONTROLLER_ELECT_MASTER`` (``brokerElect``, ``ofBrokerTrigger``): an answer
  naming a master (SUCCESS or ``CONTROLLER_MASTER_STILL_EXIST``) leads to ``RUNNING``, anything else
  is retried after ``retry_interval_ms``. Entering ``RUNNING`` unfences the broker.
- ``RUNNING``: every ``sync_broker_metadata_period_ms`` ``CONTROLLER_GET_REPLICA_INFO``: a newer
  master epoch naming a master changes the role; a newer epoch with no master asks for an
  election; the same epoch on a master takes a newer SyncStateSet; ``CONTROLLER_BROKER_METADATA_NOT_EXIST``
  registers again. The master checks its SyncStateSet every ``check_sync_state_set_period_ms``
  (``maybeShrinkSyncStateSet`` plus itself; also on the first event after it became master, so
  the HA service has carried out the change first, as Apache's executor task) and sends any
  change, and any set the HA service proposes once ``RUNNING`` (Apache registers that listener at
  the end of startBasicService), as ``CONTROLLER_ALTER_SYNC_STATE_SET`` (one at a time, the latest
  proposal waiting).
- ``SHUTDOWN``: every event is ignored.

In every state after INITIAL: ``CONTROLLER_GET_METADATA_INFO`` every
``sync_controller_metadata_period_ms`` refreshes the leader address, and once the broker id is
known a ``BROKER_HEARTBEAT`` goes to every controller every ``broker_heartbeat_interval_ms``.

``NOTIFY_BROKER_ROLE_CHANGED`` (1008) is a wake-up, never an order: its header and body are never
read; in RUNNING it asks ``CONTROLLER_GET_REPLICA_INFO`` at once, at most one in flight, and only the
controller's answer changes the role (:class:`~broker.ha.autoswitch.replicas_manager_calls.RefreshGate`).
A due poll with a query in flight is skipped.

Role changes (``changeBrokerRole``, ``changeToMaster``, ``changeToSlave``): whatever their source
(register, elect, replica-info answers), a role change is applied
only when its master epoch is **above** the last applied one (a stale or repeated epoch is
ignored), so the epochs of the emitted :class:`ChangeToMaster` / :class:`ChangeToSlave` strictly
grow. A SyncStateSet is taken (:class:`ChangeSyncStateSet`) only when its epoch is above the
current one.

Calls: the driver reports every call's outcome (:class:`Answered` / :class:`CallFailed`); a call
still unanswered ``request_timeout_ms`` after it was sent counts as failed anyway.

Routing: a request goes to the leader address when known, else to the next controller address.
``CONTROLLER_NOT_LEADER`` naming a leader (``controllerLeaderAddress``, our controller's extField)
is resent there, at most ``max_redirects`` times; one naming none, and a call with no answer,
forgets the leader and tries the next address, at most once per address. Then the step fails
as above.

Named divergences: an ``APPLY_BROKER_ID`` with no answer (timeout, leader change) keeps the temp
file and applies again (Apache clears it on any exception, which can orphan an id the controller
granted); a leftover temp file next to ``brokerIdentity`` is cleared; heartbeats start only once
the broker id is known (Apache sends them with a null id, which the controller refuses); a
1008 push is only a hint to ask the controller (Apache applies its header);
the register retry backoff is fixed (Apache sleeps a random time below 1 s).

Theory of operation: :meth:`ReplicasManager.handle` takes one event and returns the actions;
timers are due times checked on every event; pending calls are keyed by request id.
"""
from __future__ import annotations

from typing import Callable, Optional

from broker.ha.autoswitch.metadata_file import BrokerMetadata, TempBrokerMetadata
from broker.ha.autoswitch.replicas_manager_calls import Pending, RefreshGate, Timer
from broker.ha.autoswitch.replicas_messages import (
    ACCEPTS, NEXT_STATE, ON_DISK, REGISTER_REQUEST, REROUTE, HAView, RegisterState, State, Step,
    elect_body_set, sync_state_set_of,
    Action, Answered, CallFailed, ChangeSyncStateSet, ChangeToMaster, ChangeToSlave, ClearTempMetadata,
    ControllerCall, Event, FileDone, Problem, ReplicasConfig,
    RequestHeader, RoleChangeNotified, SendHeartbeat, SetFenced, SetLocalBrokerId, Shutdown, Start,
    SyncStateSetProposed, WriteMetadata, WriteTempMetadata,
)
from controller.bodies import SyncStateSet
from controller.codes import ControllerRequestCode as Q
from controller.codes import ControllerResponseCode as RC
from controller.fastjson import JsonBodyError
from controller.headers import (
    AlterSyncStateSetRequestHeader, ApplyBrokerIdRequestHeader, BrokerHeartbeatRequestHeader,
    ElectMasterRequestHeader, ElectMasterResponseHeader, EmptyHeader, GetMetaDataResponseHeader,
    GetNextBrokerIdRequestHeader, GetNextBrokerIdResponseHeader, GetReplicaInfoRequestHeader,
    GetReplicaInfoResponseHeader, HeaderError, RegisterBrokerToControllerRequestHeader,
    RegisterBrokerToControllerResponseHeader, from_ext_fields,
)

__all__ = ["HAView", "NEXT_STATE", "ON_DISK", "RegisterState", "ReplicasManager", "State"]


class ReplicasManager:
    """One broker's ReplicasManager (see the module rules)."""

    def __init__(self, config: ReplicasConfig, ha: HAView) -> None:
        self.config = config
        self.ha = ha
        self.state = State.INITIAL
        self.register_state = RegisterState.INITIAL
        self.broker_id: Optional[int] = None  # brokerControllerId
        self.metadata: Optional[BrokerMetadata] = None
        self.temp: Optional[TempBrokerMetadata] = None
        self.master_broker_id: Optional[int] = None
        self.master_address: Optional[str] = None
        self.master_epoch = 0
        self.is_master = False  # brokerRole == SYNC_MASTER
        self.sync_state_set: frozenset[int] = frozenset()
        self.sync_state_set_epoch = 0
        self.leader: Optional[str] = None  # controllerLeaderAddress
        self._cursor = 0
        self._probe_hops = 0
        self._probe_rounds = 0
        self._register_failures = 0
        self._rid = 0
        self._pending: dict[int, Pending] = {}
        self._file_op: Optional[Callable[[int, bool], list[Action]]] = None
        self._timers: dict[Timer, int] = {}
        self._alter_in_flight = False
        self._alter_queued: Optional[frozenset[int]] = None
        self.hints = RefreshGate()  # NOTIFY_BROKER_ROLE_CHANGED pushes
        self._now = 0

    # ------------------------------------------------------------------ the one entry point
    def handle(self, event: Event) -> list[Action]:
        if self.state is State.SHUTDOWN:
            return []
        self._now = event.now_ms
        if isinstance(event, Start):
            out = self._start(event)
        elif isinstance(event, Answered):
            out = self._answered(event)
        elif isinstance(event, CallFailed):
            out = self._failed(event.rid, event.now_ms)
        elif isinstance(event, FileDone):
            op, self._file_op = self._file_op, None
            out = op(event.now_ms, event.ok) if op is not None else []
            if not event.ok:
                out.insert(0, Problem(f"broker metadata file: {event.reason or 'write failed'}"))
        elif isinstance(event, RoleChangeNotified):
            out = self._hinted()
        elif isinstance(event, SyncStateSetProposed):  # the listener is registered once RUNNING
            out = self._propose(event.members, event.now_ms) if self.state is State.RUNNING else []
        elif isinstance(event, Shutdown):
            self.state, self.register_state = State.SHUTDOWN, RegisterState.INITIAL
            self._pending.clear()
            self._timers.clear()
            self.hints.reset()
            return []
        else:
            out = []
        # the HA view is read by the SyncStateSet check; a set changed by this event is applied by
        # the driver only after this call returns, so the check waits for the next event
        defer_check = any(isinstance(a, (ChangeSyncStateSet, ChangeToMaster)) for a in out)
        out += self._expire_calls(event.now_ms)
        if self.hints.follow_up(self.state is State.RUNNING, self._replica_info_in_flight()):
            out += self._ask_replica_info()  # the one follow-up of a push that found a query in flight
        return out + self._fire_timers(event.now_ms, defer_check)

    def _expire_calls(self, now: int) -> list[Action]:
        """A call unanswered for ``request_timeout_ms`` failed (the driver's report may be lost)."""
        out: list[Action] = []
        for rid in [r for r, p in self._pending.items() if now - p.sent_ms >= self.config.request_timeout_ms]:
            out += self._failed(rid, now)
        return out

    # ------------------------------------------------------------------ timers
    def _at(self, timer: Timer, due_ms: int) -> None:
        self._timers[timer] = due_ms

    def _fire_timers(self, now: int, defer_check: bool = False) -> list[Action]:
        out: list[Action] = []
        for timer in list(Timer):
            due = self._timers.get(timer)
            if due is None or due > now or self.state is State.SHUTDOWN:
                continue
            if defer_check and timer is Timer.CHECK_SYNC_STATE_SET:
                continue
            del self._timers[timer]
            out += self._on_timer(timer, now)
        return out

    def _periodic(self, timer: Timer, now: int, period: int) -> None:
        self._at(timer, now + period)

    def _on_timer(self, timer: Timer, now: int) -> list[Action]:
        c = self.config
        if timer is Timer.RETRY:
            return self._advance(now)
        if timer is Timer.HEARTBEAT:
            self._periodic(timer, now, c.broker_heartbeat_interval_ms)
            return self._heartbeats()
        if timer is Timer.CONTROLLER_METADATA:
            self._periodic(timer, now, c.sync_controller_metadata_period_ms)
            if any(p.code == Q.CONTROLLER_GET_METADATA_INFO for p in self._pending.values()):
                return []
            return self._probe_start(now)
        if timer is Timer.REPLICA_INFO:
            self._periodic(timer, now, c.sync_broker_metadata_period_ms)
            return [] if self._replica_info_in_flight() else self._ask_replica_info()
        self._periodic(timer, now, c.check_sync_state_set_period_ms)
        return self._check_sync_state_set(now)

    # ------------------------------------------------------------------ start / advance (startBasicService)
    def _start(self, ev: Start) -> list[Action]:
        self.metadata, self.temp = ev.metadata, ev.temp
        return [SetFenced(True)] + self._advance(ev.now_ms)

    def _move(self, step: Step) -> None:
        self.state = NEXT_STATE[(self.state, step)]

    def _advance(self, now: int) -> list[Action]:
        if self.state is State.INITIAL:
            if any(p.code == Q.CONTROLLER_GET_METADATA_INFO for p in self._pending.values()):
                return []
            return self._probe_start(now)
        if self.state is State.FIRST_TIME_SYNC_CONTROLLER_METADATA_DONE:
            return self._register_step(now)
        if self.state is State.REGISTER_TO_CONTROLLER_DONE:
            out = self._heartbeats()
            if self.master_broker_id is not None:
                return out + self._enter_running(now)
            return out + self._elect()
        return []

    def _enter_running(self, now: int) -> list[Action]:
        self._move(Step.MASTER_KNOWN)
        self._at(Timer.REPLICA_INFO, now + self.config.first_task_delay_ms)
        return [SetFenced(False)]

    # ------------------------------------------------------------------ leader discovery
    def _probe_start(self, now: int) -> list[Action]:
        self._probe_hops = 0
        return self._probe(self.config.controller_addresses[self._cursor % len(self.config.controller_addresses)])

    def _probe(self, address: str) -> list[Action]:
        return [self._send(Pending(Q.CONTROLLER_GET_METADATA_INFO, EmptyHeader(), None, address))]

    def _probe_answer(self, now: int, header: Optional[GetMetaDataResponseHeader]) -> list[Action]:
        if header is not None and header.controller_leader_address:
            self.leader = header.controller_leader_address
            if self.state is State.INITIAL:
                self._move(Step.LEADER_FOUND)
                self._at(Timer.CONTROLLER_METADATA, now + self.config.first_task_delay_ms)
                return self._advance(now)
            return []
        self._cursor += 1
        self._probe_hops += 1
        if self._probe_hops < len(self.config.controller_addresses):
            return self._probe(self.config.controller_addresses[self._cursor % len(self.config.controller_addresses)])
        if self.state is State.INITIAL:
            self._probe_rounds += 1
            delay = self.config.metadata_retry_ms if self._probe_rounds % 3 else self.config.retry_interval_ms
            self._at(Timer.RETRY, now + delay)
            return [Problem(f"no controller of {';'.join(self.config.controller_addresses)} names a leader")]
        return []

    # ------------------------------------------------------------------ calls and routing
    def _target(self) -> str:
        addrs = self.config.controller_addresses
        return self.leader if self.leader else addrs[self._cursor % len(addrs)]

    def _send(self, p: Pending) -> ControllerCall:
        self._rid += 1
        p.sent_ms = self._now
        self._pending[self._rid] = p
        return ControllerCall(self._rid, p.address, p.code, p.header, p.body)

    def _call(self, code: int, header: RequestHeader, body: Optional[SyncStateSet] = None) -> list[Action]:
        return [self._send(Pending(code, header, body, self._target()))]

    def _reroute(self, p: Pending, leader: Optional[str]) -> Optional[ControllerCall]:
        """Resend after NOT_LEADER / no answer, if the bounds allow; else None."""
        if leader and p.redirects < self.config.max_redirects:
            self.leader = leader
            return self._send(Pending(p.code, p.header, p.body, leader, p.redirects + 1, p.hops))
        if self.leader == p.address or not leader:
            self.leader = None
        addrs = self.config.controller_addresses
        self._cursor = (addrs.index(p.address) if p.address in addrs else self._cursor) + 1
        if p.hops + 1 >= len(self.config.controller_addresses):
            return None
        return self._send(Pending(p.code, p.header, p.body, self._target(), p.redirects, p.hops + 1))

    def _failed(self, rid: int, now: int) -> list[Action]:
        p = self._pending.pop(rid, None)
        if p is None or p.code not in ACCEPTS[self.state]:
            return []
        if p.code == Q.CONTROLLER_GET_METADATA_INFO:
            return self._probe_answer(now, None)
        again = self._reroute(p, None)
        return [again] if again is not None else self._gave_up(p, now, definite=False)

    def _answered(self, ev: Answered) -> list[Action]:
        p = self._pending.pop(ev.rid, None)
        if p is None or p.code not in ACCEPTS[self.state]:
            return []
        now = ev.now_ms
        try:
            if p.code == Q.CONTROLLER_GET_METADATA_INFO:
                ok = ev.code == RC.SUCCESS
                return self._probe_answer(now, from_ext_fields(GetMetaDataResponseHeader, ev.fields) if ok else None)
            if ev.code in REROUTE:
                again = self._reroute(p, ev.fields.get("controllerLeaderAddress"))
                return [again] if again is not None else self._gave_up(p, now, definite=False)
            return self._on_answer(p, ev, now)
        except (HeaderError, JsonBodyError) as exc:
            return [Problem(f"undecodable answer to request {p.code}: {exc}")] + self._gave_up(p, now, definite=False)

    def _on_answer(self, p: Pending, ev: Answered, now: int) -> list[Action]:
        code = p.code
        if code == Q.CONTROLLER_GET_NEXT_BROKER_ID and ev.code == RC.SUCCESS:
            nxt = from_ext_fields(GetNextBrokerIdResponseHeader, ev.fields).next_broker_id
            if nxt is not None:
                return self._write_temp(now, nxt)
        elif code == Q.CONTROLLER_APPLY_BROKER_ID and ev.code == RC.SUCCESS:
            return self._write_metadata()
        elif code == Q.CONTROLLER_REGISTER_BROKER and ev.code == RC.SUCCESS:
            return self._registered(now, from_ext_fields(RegisterBrokerToControllerResponseHeader, ev.fields),
                                    sync_state_set_of(ev.body))
        elif code == Q.CONTROLLER_ELECT_MASTER and ev.code in (RC.SUCCESS, RC.CONTROLLER_MASTER_STILL_EXIST):
            return self._elected(now, from_ext_fields(ElectMasterResponseHeader, ev.fields), ev.body)
        elif code == Q.CONTROLLER_GET_REPLICA_INFO:
            if ev.code == RC.SUCCESS:
                return self._replica_info(now, from_ext_fields(GetReplicaInfoResponseHeader, ev.fields),
                                          sync_state_set_of(ev.body))
            if ev.code == RC.CONTROLLER_BROKER_METADATA_NOT_EXIST and self.broker_id is not None:
                return self._call(Q.CONTROLLER_REGISTER_BROKER, self._register_header())
            return []
        elif code == Q.CONTROLLER_ALTER_SYNC_STATE_SET:
            out: list[Action] = []
            if ev.code == RC.SUCCESS and ev.body:
                answer = SyncStateSet.decode(ev.body)
                out = self._change_sync_state_set(frozenset(answer.sync_state_set), answer.sync_state_set_epoch)
            else:
                out = [Problem(f"CONTROLLER_ALTER_SYNC_STATE_SET refused ({ev.code}): {ev.remark}")]
            return out + self._alter_done(now)
        note: list[Action] = [Problem(f"request {code} refused ({ev.code}): {ev.remark}")]
        return note + self._gave_up(p, now, definite=True)

    def _gave_up(self, p: Pending, now: int, *, definite: bool) -> list[Action]:
        """A request with no usable answer: the step it belonged to fails."""
        if p.code == Q.CONTROLLER_APPLY_BROKER_ID and definite:
            # the id is taken: forget it and start the register sequence again (Apache's rule)
            self.register_state, self.temp = RegisterState.INITIAL, None
            return self._file(ClearTempMetadata(), lambda t, ok: self._register_failed(t))
        if p.code == Q.CONTROLLER_ALTER_SYNC_STATE_SET:
            return self._alter_done(now)
        if self.state is State.FIRST_TIME_SYNC_CONTROLLER_METADATA_DONE:
            return self._register_failed(now)
        if self.state is State.REGISTER_TO_CONTROLLER_DONE:
            self._at(Timer.RETRY, now + self.config.retry_interval_ms)
        return []

    # ------------------------------------------------------------------ the register sequence
    def _register_header(self) -> RegisterBrokerToControllerRequestHeader:
        c = self.config
        return RegisterBrokerToControllerRequestHeader(c.cluster_name, c.broker_name, self.broker_id, c.broker_address)

    def _file(self, action: Action, then: Callable[[int, bool], list[Action]]) -> list[Action]:
        self._file_op = then
        return [action]

    def _names_match(self, cluster: str, broker: str, what: str) -> Optional[Problem]:
        c = self.config
        if cluster != c.cluster_name or broker != c.broker_name:
            return Problem(f"{what} is for cluster {cluster!r} broker {broker!r}, but this broker is "
                           f"{c.cluster_name!r}/{c.broker_name!r}: fix brokerClusterName/brokerName in the "
                           f"broker config, or remove {what} to apply for a new id")
        return None

    def _register_step(self, now: int) -> list[Action]:
        """``register()``: confirm the state from disk, check it, send the step's request."""
        if self._file_op is not None or any(p.code in REGISTER_REQUEST.values() for p in self._pending.values()):
            return []
        out: list[Action] = []
        if self.register_state is RegisterState.INITIAL:
            self.register_state = ON_DISK[(self.metadata is not None, self.temp is not None)]
        problem = None
        if self.register_state is RegisterState.CREATE_METADATA_FILE_DONE and self.metadata is not None:
            problem = self._names_match(self.metadata.cluster_name, self.metadata.broker_name, "brokerIdentity")
        elif self.register_state is RegisterState.CREATE_TEMP_METADATA_FILE_DONE and self.temp is not None:
            problem = self._names_match(self.temp.cluster_name, self.temp.broker_name, "brokerIdentity-temp")
        if problem is not None:
            return [problem] + self._register_failed(now)
        if self.register_state is RegisterState.CREATE_METADATA_FILE_DONE and self.metadata is not None \
                and self.broker_id is None:
            self.broker_id = self.metadata.broker_id
            out.append(SetLocalBrokerId(self.broker_id))
            self._at(Timer.HEARTBEAT, now)
            if self.temp is not None:  # a crash after brokerIdentity, before the temp file went
                self.temp = None
                return out + self._file(ClearTempMetadata(), lambda t, ok: self._register_step(t))
        c = self.config
        if self.register_state is RegisterState.INITIAL:
            return out + self._call(Q.CONTROLLER_GET_NEXT_BROKER_ID,
                                    GetNextBrokerIdRequestHeader(c.cluster_name, c.broker_name))
        if self.register_state is RegisterState.CREATE_TEMP_METADATA_FILE_DONE and self.temp is not None:
            t = self.temp
            return out + self._call(Q.CONTROLLER_APPLY_BROKER_ID, ApplyBrokerIdRequestHeader(
                c.cluster_name, c.broker_name, t.broker_id, t.register_check_code))
        return out + self._call(Q.CONTROLLER_REGISTER_BROKER, self._register_header())

    def _write_temp(self, now: int, broker_id: int) -> list[Action]:
        c = self.config
        temp = TempBrokerMetadata(c.cluster_name, c.broker_name, broker_id, f"{c.broker_address};{now}")

        def done(t: int, ok: bool) -> list[Action]:
            if not ok:
                return self._register_failed(t)
            self.temp, self.register_state = temp, RegisterState.CREATE_TEMP_METADATA_FILE_DONE
            return self._register_step(t)
        return self._file(WriteTempMetadata(temp), done)

    def _write_metadata(self) -> list[Action]:
        assert self.temp is not None
        c = self.config
        meta = BrokerMetadata(c.cluster_name, c.broker_name, self.temp.broker_id)

        def written(t: int, ok: bool) -> list[Action]:
            if not ok:
                return self._register_failed(t)  # the temp file stays: apply again
            self.metadata, self.register_state = meta, RegisterState.CREATE_METADATA_FILE_DONE
            self.temp = None
            self.broker_id = meta.broker_id
            self._at(Timer.HEARTBEAT, t)
            return [SetLocalBrokerId(meta.broker_id)] + self._file(ClearTempMetadata(),
                                                                   lambda t2, ok2: self._register_step(t2))
        return self._file(WriteMetadata(meta), written)

    def _register_failed(self, now: int) -> list[Action]:
        self._register_failures += 1
        if self._register_failures < self.config.register_attempts:
            self._at(Timer.RETRY, now + self.config.register_backoff_ms)
            return []
        self._register_failures = 0
        self._at(Timer.RETRY, now + self.config.retry_interval_ms)
        return [Problem(f"register to the controller failed {self.config.register_attempts} times")]

    def _registered(self, now: int, h: RegisterBrokerToControllerResponseHeader,
                    sse: SyncStateSet) -> list[Action]:
        out: list[Action] = []
        if h.master_broker_id is not None:
            out = self._to_master_or_slave(h.master_broker_id, h.master_address, h.master_epoch or 0,
                                           sse.sync_state_set, h.sync_state_set_epoch or 0, now)
        if self.state is State.FIRST_TIME_SYNC_CONTROLLER_METADATA_DONE:
            self.register_state = RegisterState.REGISTERED
            self._register_failures = 0
            self._move(Step.REGISTERED)
            out += self._advance(now)
        return out

    # ------------------------------------------------------------------ election and role changes
    def _elect(self) -> list[Action]:
        c = self.config
        assert self.broker_id is not None
        return self._call(Q.CONTROLLER_ELECT_MASTER,
                          ElectMasterRequestHeader.of_broker_trigger(c.cluster_name, c.broker_name, self.broker_id))

    def _elected(self, now: int, h: ElectMasterResponseHeader, body: Optional[bytes]) -> list[Action]:
        if not h.master_address or h.master_broker_id is None:
            if self.state is State.REGISTER_TO_CONTROLLER_DONE:
                self._at(Timer.RETRY, now + self.config.retry_interval_ms)
            return [Problem("no master in this broker set yet")]
        members = elect_body_set(body)
        out = self._to_master_or_slave(h.master_broker_id, h.master_address, h.master_epoch or 0, members,
                                       h.sync_state_set_epoch or 0, now)
        if self.state is State.REGISTER_TO_CONTROLLER_DONE:
            out += self._enter_running(now)
        return out

    def _to_master_or_slave(self, master_id: int, master_address: Optional[str], epoch: int,
                            members: tuple[int, ...], sse_epoch: int, now: int) -> list[Action]:
        """``changeBrokerRole``."""
        if epoch <= self.master_epoch or self.broker_id is None:
            return []
        if master_id == self.broker_id:
            return self._change_to_master(epoch, frozenset(members), sse_epoch, now)
        return self._change_to_slave(master_address, epoch, master_id)

    def _change_to_master(self, epoch: int, members: frozenset[int], sse_epoch: int, now: int) -> list[Action]:
        self.master_epoch = epoch
        unchanged = self.is_master and self.master_broker_id == self.broker_id
        out = self._change_sync_state_set(members, sse_epoch)
        out.append(ChangeToMaster(epoch, members, sse_epoch, unchanged))
        if not unchanged:
            self.is_master = True
            self.master_address, self.master_broker_id = self.config.broker_address, self.broker_id
        # checkSyncStateSetAndDoReport, submitted to run after the change (see the rules)
        self._at(Timer.CHECK_SYNC_STATE_SET, now + 1)
        return out

    def _change_to_slave(self, master_address: Optional[str], epoch: int, master_id: int) -> list[Action]:
        self.master_epoch = epoch
        unchanged = master_id == self.master_broker_id
        if not unchanged:
            self.is_master = False
            self._timers.pop(Timer.CHECK_SYNC_STATE_SET, None)
            self._alter_queued = None
            self.master_address, self.master_broker_id = master_address, master_id
        return [ChangeToSlave(master_address, epoch, master_id, unchanged)]

    def _change_sync_state_set(self, members: frozenset[int], epoch: int) -> list[Action]:
        if epoch <= self.sync_state_set_epoch:
            return []
        self.sync_state_set, self.sync_state_set_epoch = members, epoch
        return [ChangeSyncStateSet(members, epoch)]

    def _replica_info(self, now: int, h: GetReplicaInfoResponseHeader, sse: SyncStateSet) -> list[Action]:
        epoch = h.master_epoch or 0
        if epoch > self.master_epoch:
            if h.master_address and h.master_broker_id is not None:
                return self._to_master_or_slave(h.master_broker_id, h.master_address, epoch, sse.sync_state_set,
                                                sse.sync_state_set_epoch, now)
            return self._elect() if self.broker_id is not None else []
        if epoch == self.master_epoch and self.is_master:
            return self._change_sync_state_set(frozenset(sse.sync_state_set), sse.sync_state_set_epoch)
        return []

    def _replica_info_in_flight(self) -> bool:
        return any(p.code == Q.CONTROLLER_GET_REPLICA_INFO for p in self._pending.values())

    def _ask_replica_info(self) -> list[Action]:
        """``syncBrokerMetadata``: ask the controller leader who the master is."""
        return self._call(Q.CONTROLLER_GET_REPLICA_INFO, GetReplicaInfoRequestHeader(self.config.broker_name))

    def _hinted(self) -> list[Action]:
        """A 1008 push: a wake-up to ask the controller now; its content is never read."""
        return self._ask_replica_info() if self.hints.on_hint(self.state is State.RUNNING,
                                                              self._replica_info_in_flight()) else []

    # ------------------------------------------------------------------ SyncStateSet (master only)
    def _check_sync_state_set(self, now: int) -> list[Action]:
        """``checkSyncStateSetAndDoReport``."""
        if not self.is_master or self.broker_id is None:
            return []
        proposal = self.ha.maybe_shrink_sync_state_set(now) | {self.broker_id}
        if proposal == self.sync_state_set:
            return []
        return self._propose(proposal, now)

    def _propose(self, members: frozenset[int], now: int) -> list[Action]:
        """``doReportSyncStateSetChanged``: one alteration in flight, the latest one waiting."""
        if not self.is_master or self.broker_id is None:
            return []
        if self._alter_in_flight:
            self._alter_queued = members
            return []
        self._alter_in_flight = True
        header = AlterSyncStateSetRequestHeader(self.config.broker_name, self.broker_id, self.master_epoch)
        return self._call(Q.CONTROLLER_ALTER_SYNC_STATE_SET, header,
                          SyncStateSet(tuple(sorted(members)), self.sync_state_set_epoch))

    def _alter_done(self, now: int) -> list[Action]:
        self._alter_in_flight = False
        queued, self._alter_queued = self._alter_queued, None
        if queued is None or queued == self.sync_state_set:
            return []
        return self._propose(queued, now)

    # ------------------------------------------------------------------ heartbeats
    def _heartbeats(self) -> list[Action]:
        """``sendHeartbeatToController``: to every controller, oneway."""
        if self.broker_id is None:
            return []
        c = self.config
        header = BrokerHeartbeatRequestHeader(
            c.cluster_name, c.broker_address, c.broker_name, self.broker_id, epoch=self.ha.last_epoch(),
            max_offset=self.ha.max_phy_offset(), confirm_offset=self.ha.confirm_offset(),
            heartbeat_timeout_mills=c.controller_heartbeat_timeout_ms, election_priority=c.broker_election_priority)
        return [SendHeartbeat(a, header) for a in c.controller_addresses]
