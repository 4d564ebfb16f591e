"""Type aliases the store shares, so its contracts say what they carry instead of ``Any``.

- :data:`Json`: what a status or report holds (it becomes JSON in /status and /metrics):
  plain values, sequences and string-keyed mappings (covariant, so a ``list[dict[str, int]]``
  is one).
- :data:`Buffer`: bytes a record parser reads with ``struct.unpack_from`` and slices:
  ``bytes``, ``bytearray``, ``memoryview`` or a whole ``mmap``.
"""
from __future__ import annotations

import mmap
from typing import Mapping, Sequence, Union

Json = Union[None, bool, int, float, str, Sequence["Json"], Mapping[str, "Json"]]
JsonObject = dict[str, Json]
Buffer = Union[bytes, bytearray, memoryview, mmap.mmap]
