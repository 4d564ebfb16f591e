"""The client channel of a DLedgerServer: ``append``, ``get``, ``status`` and ``transfer`` requests.

Rules: every request is answered once, with its ``rid``; a malformed request is
UNEXPECTED_ARGUMENT, an unknown op UNSUPPORTED, an exception INTERNAL_ERROR (a client never kills
the server); NOT_LEADER answers carry the leader's id and address; ``get`` serves committed
entries only. Appends go through the server's coalescer like its own.

Theory of operation: a mixin of :class:`~dledger.server.DLedgerServer` (split out to keep that
module about the consensus drive loop); it uses the server's ``config``, ``core``, ``log_view``,
``counters``, ``_loop`` and its request checks.
"""
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Optional

from .coalesce import ClientReply
from .core.codes import Code
from .rpc import transport as tp

log = logging.getLogger("dledger.server")


class ClientChannel:
    """Client request handling of DLedgerServer (see the module rules)."""

    config: Any
    core: Any
    log_view: Any
    counters: dict[str, Any]
    _loop: Optional[asyncio.AbstractEventLoop]

    if TYPE_CHECKING:  # provided by DLedgerServer
        @property
        def leader_id(self) -> Optional[str]: ...

        def _check_request(self, bodies: list[bytes]) -> Optional[tuple[Code, str]]: ...

        def _enqueue(self, bodies: list[bytes], sink: Any) -> None: ...

        def status(self) -> dict[str, Any]: ...

        async def transfer_leadership(self, to: str) -> Code: ...

    def _on_client_request(self, session: tp.ClientSession, req: dict) -> None:
        rid = req.get("rid")
        op = req.get("op")
        try:
            if op == "append":
                bodies = req.get("bodies")
                if not isinstance(bodies, list) or not all(isinstance(b, bytes) for b in bodies):
                    session.reply(self._error(rid, Code.UNEXPECTED_ARGUMENT, "bodies must be a list of bytes"))
                    return
                bad = self._check_request(bodies)
                if bad is not None:
                    self.counters["append_refused"] += 1
                    session.reply(self._error(rid, *bad))
                    return
                self._enqueue(bodies, ClientReply(session.reply, rid))
            elif op == "get":
                session.reply(self._get(rid, req.get("index")))
            elif op == "status":
                session.reply({"t": "resp", "rid": rid, "code": int(Code.SUCCESS), "status": self.status()})
            elif op == "transfer":
                to = req.get("to")
                if not isinstance(to, str):
                    session.reply(self._error(rid, Code.UNEXPECTED_ARGUMENT, "'to' must be a peer id"))
                    return
                task = self._loop.create_task(self.transfer_leadership(to))  # type: ignore[union-attr]
                task.add_done_callback(lambda t: session.reply(self._transfer_reply(rid, to, t)))
            else:
                session.reply(self._error(rid, Code.UNSUPPORTED, f"unknown op {op!r}"))
        except Exception as exc:  # never let a client kill the server
            log.exception("%s: client request %r failed", self.config.self_id, op)
            session.reply(self._error(rid, Code.INTERNAL_ERROR, str(exc)))

    def _error(self, rid: Any, code: Code, msg: str, leader_id: Optional[str] = None) -> dict:
        out = {"t": "resp", "rid": rid, "code": int(code), "error": msg}
        if code is Code.NOT_LEADER or leader_id:
            lid = leader_id or self.leader_id
            out["leader_id"] = lid
            out["leader_addr"] = self.config.address_of(lid)
        return out

    def _transfer_reply(self, rid: Any, to: str, task: asyncio.Task) -> dict:
        if task.cancelled() or task.exception() is not None:
            return self._error(rid, Code.INTERNAL_ERROR, "transfer failed")
        code = task.result()
        if code is Code.SUCCESS:
            return {"t": "resp", "rid": rid, "code": int(Code.SUCCESS), "leader": to}
        return self._error(rid, code, f"transfer to {to} failed")

    def _get(self, rid: Any, index: Any) -> dict:
        if type(index) is not int:
            return self._error(rid, Code.UNEXPECTED_ARGUMENT, "'index' must be an integer")
        committed = self.core.status().committed_index
        if index < self.log_view.ledger_begin_index or index > committed:
            return self._error(rid, Code.INDEX_OUT_OF_RANGE,
                               f"index {index} outside [{self.log_view.ledger_begin_index}, {committed}] (committed)")
        return {"t": "resp", "rid": rid, "code": int(Code.SUCCESS), "entry": self.log_view.get_entry(index)}

