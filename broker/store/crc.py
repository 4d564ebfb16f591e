"""CRC-32 of commitlog bytes: ISA-L's when it is installed, else zlib's; the same numbers.

Rules:
- :data:`crc32` is the IEEE 802.3 CRC-32 of ``zlib.crc32`` (``java.util.zip.CRC32``, what
  RocketMQ's ``UtilAll.crc32`` masks to a BODYCRC): same value for any buffer, one argument.
  Record bodies (the put path, every read with ``checkCRCOnRead``, recovery, verification),
  the page sidecars (``broker.store.page_crc``) and the C record encoder use it.
- ``isal`` (python-isal, Intel ISA-L's PCLMUL CRC; a dependency) is preferred; without it
  (another platform, a broken wheel) zlib's answers, with the same results, only slower.
  :data:`IMPLEMENTATION` says which.

Why: on this machine zlib 1.2.13's CRC costs 560 ns per KiB and ISA-L's 160 (call included):
the body CRC was the largest single cost of encoding a 1 KiB record, and a 4 KiB page seal
costs 3.6 us with zlib.
"""
from __future__ import annotations

from typing import Callable, Final

from broker.store.store_types import Buffer

try:
    from isal.isal_zlib import crc32 as _crc32

    _IMPL = "isal"
except ImportError:  # pragma: no cover - isal is a dependency; this keeps a broken install working
    from zlib import crc32 as _crc32

    _IMPL = "zlib"

crc32: Final[Callable[[Buffer], int]] = _crc32
IMPLEMENTATION: Final[str] = _IMPL
