"""Test helpers: remoting shortcuts (one request on a fresh connection).

The ``mqnamesrv`` process the tests start is :class:`tools.nodes.NamesrvProc` (issue 26.7: one
process vocabulary for tests, bench and demo).
"""
from __future__ import annotations

import asyncio
from typing import Any, Optional

from broker.remoting.client import RemotingClient
from broker.remoting.codec import RemotingCommand


def request(port: int, code: int, fields: Optional[dict[str, Any]] = None, body: bytes = b"",
            timeout: float = 5.0, **kw: Any) -> RemotingCommand:
    """One request on a fresh connection (sync wrapper for tests)."""
    async def run() -> RemotingCommand:
        cl = await RemotingClient.connect("127.0.0.1", port, **kw)
        try:
            return await cl.request(code, fields, body, timeout=timeout)
        finally:
            await cl.close()
    return asyncio.run(run())
