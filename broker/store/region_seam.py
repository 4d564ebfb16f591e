"""FrozenRegions: what the classic CommitLog asks of the frozen regions of a migrated store.

Rules: the classic :class:`~broker.store.commitlog.CommitLog` of a store migrated from DLedger mode
to Controller mode is given an object of this shape (``commitlog_regions.CommitLogRegions``) and
routes to it every read by physical offset below ``classic_from``, its start-up (verification and
the dispatch gap) and the retention of frozen files; nothing else.

Theory of operation: a narrow Protocol of its own module, so the commitlog names the regions'
type without importing their implementation (which imports the commitlog: no import circle).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from broker.store.store_host import StoreHost
    from broker.store.verify import CorruptionLog


class FrozenRegions(Protocol):
    """The read-only regions below ``classic_from`` of a migrated store (``commitlog_regions``)."""

    classic_from: int

    @property
    def min_offset(self) -> int: ...

    def get_message(self, offset: int, size: int, checked_pages: set[tuple[str, int]] | None = None
                    ) -> memoryview | None: ...

    def get_record(self, offset: int) -> memoryview | None: ...

    def configure_reads(self, verify: bool, node_label: str, corruption: CorruptionLog) -> None: ...

    def recover(self, store: StoreHost, max_phy_of_cq: int, crashed: bool, writable_safe: bool) -> int: ...

    def delete_expired(self, expired_seconds: float, max_delete: int, clean_immediately: bool, now: float | None,
                       after_all: int, before_delete: Callable[[int], None] | None) -> int: ...

    def close(self) -> None: ...
