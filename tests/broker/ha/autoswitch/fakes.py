"""Fakes of the broker's side shared by the ReplicasManager / ReplicasDriver tests.

Rules: each fake implements one narrow Protocol of ``broker.ha.autoswitch`` and nothing more; a
test that needs other answers defines its own (e.g. ``test_replicas_manager``'s HA with a log).
"""
from __future__ import annotations


class EmptyHA:
    """The ``HAView`` of a replica that holds nothing: epoch 0, offsets 0, a SyncStateSet that never
    shrinks."""

    def last_epoch(self) -> int:
        return 0

    def max_phy_offset(self) -> int:
        return 0

    def confirm_offset(self) -> int:
        return 0

    def maybe_shrink_sync_state_set(self, now_ms: int) -> frozenset[int]:
        return frozenset()
