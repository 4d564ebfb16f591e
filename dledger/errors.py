"""DLedgerError: a failed request or append, carrying a DLedger response code.

Rules
-----
* ``code`` is a :class:`dledger.core.codes.Code` value (DLedger's numbers); ``str(err)`` starts
  with its name so logs read like DLedger's.
* ``NOT_LEADER`` errors carry the leader's id and ``host:port`` when this node knows them, so a
  caller can redirect without another round trip.

Theory of operation
-------------------
Shared by the server (failed append futures) and the client (error responses), so both sides
raise the same type.
"""
from __future__ import annotations

from typing import Optional

from .core.codes import Code


class DLedgerError(Exception):
    def __init__(self, code: int, message: str = "", leader_id: Optional[str] = None,
                 leader_addr: Optional[str] = None) -> None:
        try:
            name = Code(code).name
        except ValueError:
            name = str(code)
        super().__init__(f"{name} ({code}): {message}" if message else f"{name} ({code})")
        self.code = code
        self.message = message
        self.leader_id = leader_id
        self.leader_addr = leader_addr
