"""Small asyncio task helpers shared by the broker's background services.

They are ``dledger.aio``'s (the lower layer): bounded waits and cancellation that a service loop
cannot lose on Python 3.10/3.11 (see that module for why ``asyncio.wait_for`` is not used).
"""
from __future__ import annotations

from dledger.aio import cancel_and_wait, wait_event, wait_for

__all__ = ["cancel_and_wait", "wait_event", "wait_for"]
