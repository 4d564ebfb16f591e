"""StoreLog: the DLedger file store seen as the consensus core's ``LogView``, plus core set-up.

Rules
-----
* Translates between the core's conventions and the store's: the core's ``get_raw(lo, hi,
  max_bytes)`` is inclusive of ``hi``, the store's is exclusive; the core's ``truncate_from``
  (drop indexes >= n) is the store's ``truncate(n - 1)`` (keep up to n - 1).
* Leader appends go through ``append_batch_as_leader`` so the append hooks run; the store must
  assign exactly the indexes the core reserved (checked: a mismatch means the two disagree about
  the log and is a bug, raised as ``AssertionError``).
* Follower entries are written as received (the raw encoded bytes the leader read from its own
  disk, hooks already applied).
* Timing in milliseconds (``DLedgerConfig``) becomes whole core ticks of ``tick_ms``.

Theory of operation
-------------------
The server owns one :class:`StoreLog`; it is the only object that touches the store, which keeps
the driver code in ``server.py`` free of store details. ``flush`` runs in the
:class:`GroupFlusher` thread (the store supports one concurrent flusher); everything else runs
on the event loop.

Group commit (:class:`GroupFlusher`): after every write the loop hands the flusher thread the
pair ``(ledger_end_index, ledger_end_term)`` it has just written (``request``, a lock and a
notify, no syscall when the thread is busy). The thread flushes, then reports exactly that pair
back to the loop with ``call_soon_threadsafe``, and starts the next flush at once if more was
written meanwhile: the flusher never waits for the loop to get round to it, so under load the
disk is flushed back to back and every write waits for at most one flush in progress plus its
own. A truncation racing a flush makes the reported pair stale, which the core detects (the
term at that index differs) and ignores.
"""
from __future__ import annotations

import asyncio
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Optional, Sequence

from .config import DLedgerConfig
from .core.config import Config as CoreConfig
from .core.messages import Entry
from .core.raft import RaftCore
from .core.ready import HardState
from .entry import Buffer, DLedgerEntry
from .store.identity import StoreIdentityFile
from .store.file_store import DLedgerMmapFileStore


def open_store(cfg: DLedgerConfig) -> DLedgerMmapFileStore:
    store = DLedgerMmapFileStore(
        cfg.store_base_dir, cfg.self_id,
        data_file_size=cfg.mapped_file_size_for_entry_data,
        index_file_size=cfg.mapped_file_size_for_entry_index,
        data_store_path=cfg.data_store_path,
        entry_crc=cfg.entry_crc,
        first_data_file_offset=max(cfg.first_data_offset, 0),
    )
    ident = StoreIdentityFile(store.default_path, store.data_store_path)  # issue 13.7
    record = ident.verify(cfg.store_identity(), cfg.conf_key)
    store.startup()
    if record:
        ident.save(cfg.store_identity())
    return store


def _ticks(ms: int, tick_ms: int, minimum: int = 1) -> int:
    return max(minimum, -(-ms // tick_ms))


def core_config(cfg: DLedgerConfig) -> CoreConfig:
    t = cfg.tick_ms
    hb = _ticks(cfg.heartbeat_interval_ms, t)
    emin = max(_ticks(cfg.election_timeout_min_ms, t), hb + 1)
    emax = max(_ticks(cfg.election_timeout_max_ms, t), emin + 1)
    return CoreConfig(
        self_id=cfg.self_id,
        peers=tuple(cfg.peer_ids),
        election_ticks_min=emin,
        election_ticks_max=emax,
        heartbeat_ticks=hb,
        pre_vote=cfg.pre_vote,
        boot_lease=True,  # a restarting member never helps depose a live leader (issue 24.6)
        max_inflight=cfg.max_inflight_pushes,
        max_batch_bytes=cfg.max_batch_push_bytes,
        max_batch_entries=1024 if cfg.enable_batch_push else 1,
        push_timeout_ticks=max(_ticks(300, t), 3 * hb),
        max_pending=cfg.max_pending_requests,
        max_wait_ack_ticks=_ticks(cfg.max_wait_ack_ms, t),
        preferred_leaders=tuple(cfg.preferred_leaders),
        preferred_check_ticks=_ticks(cfg.preferred_leader_check_ms, t),
        max_transfer_lag=cfg.max_leadership_transfer_wait_index,
        transfer_timeout_ticks=_ticks(cfg.leadership_transfer_wait_timeout_ms, t),
    )


class StoreLog:
    """``LogView`` over a :class:`DLedgerMmapFileStore` (see module rules)."""

    def __init__(self, store: DLedgerMmapFileStore, parallel_flush: bool = True) -> None:
        self.store = store
        self._index_flusher = (ThreadPoolExecutor(1, thread_name_prefix="dledger-index-flush")
                               if parallel_flush else None)

    # -- LogView
    @property
    def ledger_begin_index(self) -> int:
        return self.store.ledger_begin_index

    @property
    def ledger_end_index(self) -> int:
        return self.store.ledger_end_index

    @property
    def ledger_end_term(self) -> int:
        return self.store.ledger_end_term

    def term_at(self, index: int) -> int:
        return self.store.term_at(index)

    def get_raw(self, lo: int, hi: int, max_bytes: int) -> list[Any]:
        # memoryviews: the transport packs them before any await, so no copy is needed
        return self.store.get_raw(lo, hi + 1, max_bytes)

    # -- core construction
    def make_core(self, cfg: DLedgerConfig, rng: random.Random, barrier: bool) -> RaftCore:
        term, vote = self.store.member_state_file.load()
        ccfg = core_config(cfg)
        if barrier:
            ccfg = CoreConfig(**{**ccfg.__dict__, "leader_barrier": True})
        return RaftCore(ccfg, self, rng, HardState(term, vote), committed_index=self.store.committed_index)

    # -- writes
    def add_append_hook(self, hook: Callable[[DLedgerEntry, memoryview, int], None]) -> None:
        self.store.add_append_hook(hook)

    def append_as_leader(self, bodies: Sequence[Buffer], first_index: int, term: int) -> list[int]:
        entries = self.store.append_batch_as_leader(bodies, term)
        if entries[0].index != first_index:
            raise AssertionError(f"store appended index {entries[0].index}, core reserved {first_index}")
        return [e.pos for e in entries]

    def append_as_follower(self, entries: list[Entry]) -> None:
        self.store.append_batch_as_follower([e.data for e in entries])

    def reset_begin(self, entries: list[Entry]) -> None:
        """The core's ``reset_begin``: the log restarts at ``entries[0]`` (the leader's first)."""
        self.store.begin_at(entries[0].data)
        if len(entries) > 1:
            self.store.append_batch_as_follower([e.data for e in entries[1:]])

    def truncate(self, truncate_from: int) -> None:
        self.store.truncate(truncate_from - 1)

    def persist_hard_state(self, term: int, vote: Optional[str]) -> None:
        self.store.member_state_file.save(term, vote)

    def update_committed_index(self, term: int, index: int) -> None:
        self.store.update_committed_index(term, index)

    def flush(self) -> int:
        """Make every appended entry durable; returns the flushed index (flusher thread).

        The data and index files are synced in parallel: a helper thread syncs the index list
        while the store syncs data and then the index again (by then a cheap no-op for what
        the helper covered). Both finish before this returns, so the result is exactly the
        store's own ``flush()`` guarantee in about the time of the slower of the two syncs.
        """
        helper = self._index_flusher
        if helper is None:
            return self.store.flush()
        fut = helper.submit(self.store.index_file_list.flush)
        try:
            return self.store.flush()
        finally:
            fut.result()  # re-raises a failed index sync: the flush as a whole failed

    def persist_checkpoint(self) -> None:
        self.store.persist_checkpoint()

    def get_entry(self, index: int) -> dict[str, Any]:
        e = self.store.get(index)
        return {"index": e.index, "term": e.term, "pos": e.pos, "magic": e.magic, "body": bytes(e.body)}

    def close(self) -> None:
        if self._index_flusher is not None:
            self._index_flusher.shutdown(wait=True)
            self._index_flusher = None
        self.store.shutdown()


class GroupFlusher:
    """Dedicated group-commit thread over a :class:`StoreLog` (see module theory)."""

    def __init__(self, log_view: StoreLog, loop: asyncio.AbstractEventLoop,
                 on_flushed: Callable[[int, int, float], None], on_error: Callable[[BaseException], None],
                 counters: dict[str, Any], name: str = "dledger-flush") -> None:
        self.log_view = log_view
        self.loop = loop
        self.on_flushed = on_flushed  # (end_index, end_term, perf_counter at the end of the flush)
        self.on_error = on_error
        self.counters = counters
        self._cond = threading.Condition(threading.Lock())
        self._target: Optional[tuple[int, int]] = None
        self._stop = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def request(self) -> None:
        """Loop thread, after a write: flush at least up to what is written now."""
        lv = self.log_view
        with self._cond:
            self._target = (lv.ledger_end_index, lv.ledger_end_term)
            self._cond.notify()

    def stop(self, timeout: float = 5.0) -> bool:
        """Ask the thread to finish (a flush in progress completes); True once it has exited."""
        with self._cond:
            self._stop = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        cond, counters = self._cond, self.counters
        while True:
            with cond:
                while self._target is None and not self._stop:
                    cond.wait()
                if self._stop:
                    return
                target, self._target = self._target, None
                assert target is not None  # the wait above ends only with a target or _stop
            t0 = time.perf_counter()
            try:
                self.log_view.flush()
            except BaseException as exc:  # durability is lost: the member must stop
                self._call(self.on_error, exc)
                return
            t1 = time.perf_counter()
            counters["flushes"] += 1
            counters["flush_seconds"] += t1 - t0
            if target[0] >= 0:
                self._call(self.on_flushed, target[0], target[1], t1)

    def _call(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # loop closed: nobody is left to tell
            pass
