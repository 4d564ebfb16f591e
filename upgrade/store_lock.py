"""The one lock probe of mqupgrade: is a broker (or another mqupgrade) using this store?

Rules: take and drop the store's own ``lock`` for an instant (RocketMQ's ``tryLock``), the only
reliable way to see a running broker; a root without a ``lock`` file has never been opened, so
nobody holds it. The answer is the holder's description (the lock's own message) or None.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from broker.store.lockfile import StoreLock, StoreLockedError


def lock_holder(root: Path) -> Optional[str]:
    if not (root / "lock").exists():
        return None
    lock = StoreLock(root)
    try:
        lock.acquire()
    except StoreLockedError as exc:
        return str(exc)
    except OSError as exc:
        return f"cannot probe the lock ({exc.strerror})"
    lock.release()
    return None
