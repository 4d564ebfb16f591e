"""Controller tests' remoting helpers: a bounded connect, the leader by GET_METADATA_INFO, requests.

The controller processes themselves are :class:`tools.controller_cluster.ControllerGroup` (one
harness for the tests, the fault suite and bench); ``free_ports`` and ``REPO`` are
:mod:`tools.procs`' (re-exported: other test modules import them from here).

Every wait is bounded; the tests stop their group with ``stop_all`` in ``finally``.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, Optional

from broker.remoting.client import RemotingClient
from broker.remoting.codec import RemotingCommand
from controller.codes import ControllerRequestCode as Q
from tools.controller_cluster import ControllerGroup
from tools.procs import REPO, free_ports

__all__ = ["REPO", "free_ports", "connect", "find_leader", "request"]


async def connect(port: int, timeout: float = 20.0, **kw: Any) -> RemotingClient:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await RemotingClient.connect("127.0.0.1", port, **kw)
        except OSError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def find_leader(group: ControllerGroup, timeout: float = 30.0, exclude: tuple[str, ...] = ()) -> str:
    """The running member answering GET_METADATA_INFO with isLeader=true."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in group.ids:
            if pid in exclude or not group.alive(pid):
                continue
            try:
                c = await RemotingClient.connect("127.0.0.1", group.door[pid])
            except OSError:
                continue
            try:
                r = await c.request(Q.CONTROLLER_GET_METADATA_INFO, timeout=2)
                if r.ext_fields.get("isLeader") == "true":
                    return pid
            except (OSError, asyncio.TimeoutError):
                pass
            finally:
                await c.close()
        await asyncio.sleep(0.2)
    raise AssertionError(f"no controller leader within {timeout} s: " +
                         " | ".join(group.log_tail(p, 1500) for p in group.ids if group.alive(p)))


def request(code: int, fields: Optional[dict[str, Any]] = None, body: bytes = b"") -> RemotingCommand:
    return RemotingCommand.request(code, {k: str(v) for k, v in (fields or {}).items()}, body)
