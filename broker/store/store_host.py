"""StoreHost: what a commitlog and its recovery may ask of the message store that owns it.

Rules:
- A commitlog (classic or DLedger), its recovery and the start-up verification are given the
  store as a :class:`StoreHost`, never as ``DefaultMessageStore``: they import this module, the
  facade imports them, and no import runs the other way (no circle: issue 26).
- Only what they use is here; a new need is a new line, checked by mypy against the facade.

Theory of operation: ``DefaultMessageStore`` matches this Protocol structurally; mypy checks
every call site that passes ``self``.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from broker.config.broker_config import BrokerConfig
    from broker.store.checkpoint import StoreCheckpoint
    from broker.store.consume_queue import ConsumeQueueStore
    from broker.store.dispatch import DispatchRequest, SkippedRecords
    from broker.store.store_settings import StoreSettings


class StoreHost(Protocol):
    settings: StoreSettings
    root: Path
    store_path_commitlog: Path
    checkpoint: StoreCheckpoint | None
    delay_levels: tuple[int, ...]
    broker_config: BrokerConfig | None
    arrival_listeners: list[Callable[[list[DispatchRequest]], None]]
    consume_queue_store: ConsumeQueueStore | None
    last_exit_ok: bool
    skipped: SkippedRecords

    @property
    def dispatching(self) -> bool:
        """The ReputMessageService runs (it is made at start)."""

    def wake_dispatch(self) -> None: ...

    def do_dispatch(self, request: DispatchRequest) -> None: ...

    def dispatch_behind_bytes(self) -> int: ...

    def recover_topic_queue_table(self) -> None: ...


