"""RecentTable: a bounded, time-windowed map that Python's garbage collector never walks.

Rules
-----
- ``put(key, now, payload)`` stores ``payload`` (bytes) under ``key`` (str); ``keep`` does the
  same unless the key is already live with that payload; ``get(key, limit)`` returns it while it is among the newest ``max_keys`` puts and was put at or after ``limit``;
  otherwise None. Putting a key again replaces its payload and its age.
- The oldest entries are dropped first, by count (``max_keys``, at most ``capacity``) and by age
  (:meth:`trim`, called on every put).
- Nothing here is a container of Python objects the cyclic collector traverses: the index is a
  ``dict[str, bytes]`` (CPython never tracks a dict whose keys and values are all atomic), the
  ages are an ``array('d')`` ring. A full collection therefore costs nothing per entry. With an
  ``OrderedDict`` of tuples, 60 s of a broker's sends made every full collection 60-100 ms, all
  threads stopped, and under load that starved DLedger heartbeats (issue 22.3).

Theory of operation: every put takes the next sequence number ``seq``; its time goes to slot
``seq % capacity`` of the ring and ``index[key] = seq (8 bytes) + payload``. The live range is
``[head, tail)``; trimming only moves ``head``. A key whose sequence number fell below ``head``
is stale and is answered None; stale keys are removed from the index in one pass whenever they
outnumber the live entries (amortised O(1) per put).
"""
from __future__ import annotations

import struct
from array import array
from typing import Final, Optional

_SEQ: Final = struct.Struct("<q")


class RecentTable:
    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        self.capacity = capacity
        self._times: Optional[array] = None  # allocated at the first put (8 bytes per slot)
        self._index: dict[str, bytes] = {}
        self.head = 0
        self.tail = 0

    def __len__(self) -> int:
        """Live puts (a key put twice within the window counts twice until the older one ages out)."""
        return self.tail - self.head

    def put(self, key: str, now: float, payload: bytes, limit: float, max_keys: int) -> None:
        times = self._times
        if times is None:
            times = self._times = array("d", bytes(8 * self.capacity))
        seq = self.tail
        self.tail = seq + 1
        times[seq % self.capacity] = now
        self._index[key] = _SEQ.pack(seq) + payload
        self.trim(limit, max_keys)

    def keep(self, key: str, now: float, payload: bytes, limit: float, max_keys: int) -> None:
        """:meth:`put`, unless ``key`` is live (put at or after ``limit``, not trimmed) with this
        very payload: then nothing changes, its age neither (one read, no allocation)."""
        v = self._index.get(key)
        if v is not None and len(v) == 8 + len(payload) and v.endswith(payload):
            seq = _SEQ.unpack_from(v)[0]
            times = self._times
            if seq >= self.head and times is not None and times[seq % self.capacity] >= limit:
                return
        self.put(key, now, payload, limit, max_keys)

    def has(self, key: str) -> bool:
        """``key`` was put and not trimmed yet (it may be older than a caller's limit: :meth:`get`
        says). A plain dict read: safe without the owner's lock."""
        return key in self._index

    def get(self, key: str, limit: float) -> Optional[bytes]:
        v = self._index.get(key)
        if v is None:
            return None
        seq = _SEQ.unpack_from(v)[0]
        if seq < self.head or self._times is None or self._times[seq % self.capacity] < limit:
            return None
        return v[8:]

    def trim(self, limit: float, max_keys: int) -> None:
        times = self._times
        if times is None:
            return
        keep = min(max_keys, self.capacity)
        cap = self.capacity
        head, tail = self.head, self.tail
        if tail - head > keep:
            head = tail - keep
        while head < tail and times[head % cap] < limit:
            head += 1
        self.head = head
        index = self._index
        if len(index) > 2 * (tail - head) + 1024:
            self._index = {k: v for k, v in index.items() if _SEQ.unpack_from(v)[0] >= head}
