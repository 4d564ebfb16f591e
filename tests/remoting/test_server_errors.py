"""A processor's failure is answered SYSTEM_ERROR and the connection stays open, compiled or not.

Found while adding brokerPermission (issue 25): compiled with mypyc, an ``except X as exc``
clause after ``except RpcHookRefusal as exc`` kept the first clause's type for ``exc``, so any
other exception became a TypeError inside the handler task: no response at all, and the client
waited for its timeout. Each except clause now has its own name; this test runs the compiled
server (and, in CI's second pass, the pure-Python one).
"""
from __future__ import annotations

import asyncio

from broker.remoting.client import RemotingClient
from broker.remoting.codec import RemotingCommand
from broker.remoting.codes import ResponseCode as R
from broker.remoting.server import RemotingConnection, RemotingServer, RpcHookRefusal
from broker.store.errors import StoreError


def test_every_kind_of_failure_gets_an_answer() -> None:
    async def boom(cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        raise ValueError("no such thing")

    async def damaged(cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        raise StoreError("record at offset 42 is damaged: restore it")

    async def refused(cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        raise RpcHookRefusal("not yours")

    async def run() -> list[tuple[int, str]]:
        server = RemotingServer(name="t")
        for code, handler in ((901, boom), (902, damaged), (903, refused)):
            server.register(code, handler)
        await server.start("127.0.0.1", 0)
        cl = await RemotingClient.connect("127.0.0.1", server.port)
        try:
            out = []
            for code in (901, 902, 903, 904, 901):
                r = await cl.request(code, {}, timeout=3.0)
                out.append((r.code, r.remark or ""))
            return out
        finally:
            await cl.close()
            await server.stop()

    answers = asyncio.run(run())
    assert answers[0] == (R.SYSTEM_ERROR, "ValueError: no such thing")
    assert answers[1] == (R.SYSTEM_ERROR, "record at offset 42 is damaged: restore it")
    assert answers[2] == (R.NO_PERMISSION, "not yours")
    assert answers[3][0] == R.REQUEST_CODE_NOT_SUPPORTED
    assert answers[4] == answers[0]  # the connection still works
