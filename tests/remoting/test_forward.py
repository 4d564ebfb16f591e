"""A DLedger follower forwards a client's send to the leader and relays the answer (issue 22.4).

Three real broker processes. A 4.9.8 producer whose route is stale sends to a follower; it must get
the leader's answer (SUCCESS, msgId, queueId, queueOffset) and the message must be on the leader.
A request already forwarded once (``FORWARDED_FLAG``) is answered by the follower itself, so a
send never loops between brokers. Unit rules of the forwarder (cap, unknown outcome) run without
processes below.
"""
from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from broker.remoting.client import RemotingClient
from broker.remoting.codec import RemotingCommand
from broker.remoting.codes import RequestCode as RC
from broker.remoting.codes import ResponseCode as R
from broker.remoting.forward import FORWARDED_FLAG, SendForwarder
from tools.nodes import BrokerProc, kill_all
from tools.procs import wait_until
from tools.nodes import NamesrvProc
from tests.remoting.test_ali_ons import DLEDGER_IDS, _dledger_confs
from tests.remoting.test_cpp_client import create_topics

TOPIC = "ForwardedSends"


def _send(port: int, body: bytes, flag: int = 0, queue_id: int = 1) -> RemotingCommand:
    fields = {"a": "PG_FORWARD", "b": TOPIC, "c": "TBW102", "d": "4", "e": str(queue_id), "f": "0",
              "g": str(int(time.time() * 1000)), "h": "0", "i": "", "j": "0", "k": "false", "l": "16", "m": "false"}

    async def run() -> RemotingCommand:
        cl = await RemotingClient.connect("127.0.0.1", port)
        try:
            cmd = RemotingCommand.request(RC.SEND_MESSAGE_V2, fields, body)
            cmd.flag |= flag
            return await cl.invoke(cmd, 10.0)
        finally:
            await cl.close()
    return asyncio.run(run())


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
def test_a_follower_forwards_sends_to_the_leader_once(tmp_path: Path) -> None:
    ns = NamesrvProc(tmp_path)
    procs: dict[str, BrokerProc] = {}
    try:
        ns.start()
        confs = _dledger_confs(tmp_path, ns.address)
        for n, (conf, port) in confs.items():
            procs[n] = BrokerProc(conf, port, n, tmp_path)
            procs[n].start(wait=False)
        for p in procs.values():
            p.wait_ready(60)

        def roles() -> dict[str, bool] | None:
            out = {}
            for n in DLEDGER_IDS:
                try:
                    with procs[n].client(timeout=3) as c:
                        out[n] = bool(c.status()["isMaster"])
                except Exception:  # noqa: BLE001 - not up yet
                    return None
            return out if sum(out.values()) == 1 else None

        leader = next(n for n, m in wait_until(roles, 60, "one DLedger master").items() if m)
        follower = next(n for n in DLEDGER_IDS if n != leader)
        create_topics(confs[leader][1], TOPIC)

        def forwarded() -> RemotingCommand | None:  # the follower learns its leader's address first
            r = _send(confs[follower][1], b"forwarded-0")
            return r if r.code == R.SUCCESS else None

        first = wait_until(forwarded, 30, "a send to the follower answered by the leader")
        answers = [first] + [_send(confs[follower][1], b"forwarded-%d" % i) for i in range(1, 5)]
        assert all(a.code == R.SUCCESS for a in answers), [(a.code, a.remark) for a in answers]
        offsets = [int(a.ext_fields["queueOffset"]) for a in answers]
        assert offsets == list(range(offsets[0], offsets[0] + 5)) and all(a.ext_fields["queueId"] == "1"
                                                                          for a in answers)
        def pulled() -> dict | None:  # acknowledged, then dispatched a moment later (as Apache's reput): bounded poll
            with procs[leader].client() as c:
                got = c.pull(TOPIC, 1, offsets[0], 32)
            return got if len(got["messages"]) >= 5 else None

        got = wait_until(pulled, 5, "the five forwarded messages dispatched on the leader")
        bodies = [m["body"] for m in got["messages"]]
        assert len(bodies) == 5 and all(b is not None for b in bodies), got
        # one hop only: a request that was already forwarded is refused by the follower itself
        again = _send(confs[follower][1], b"looped", flag=FORWARDED_FLAG)
        assert again.code != R.SUCCESS and "not the master" in (again.remark or ""), (again.code, again.remark)
        with procs[leader].client() as c:
            assert c.pull(TOPIC, 1, offsets[-1] + 1, 32)["messages"] == []
    finally:
        kill_all(procs.values())
        ns.kill9()


async def test_forwarder_caps_falls_back_before_sending_and_reports_unknown_after() -> None:
    """Nothing sent (no leader / cap / unreachable): None, so the follower refuses as before.
    Sent but unanswered: SYSTEM_ERROR 'outcome unknown' naming the leader, never a refusal."""
    cmd = RemotingCommand.request(RC.SEND_MESSAGE_V2, {"b": "T"}, b"x")
    assert SendForwarder(lambda: None).target(cmd) is None
    fw = SendForwarder(lambda: "127.0.0.1:1", max_inflight=0)
    assert fw.target(cmd) is None  # over the cap
    fw = SendForwarder(lambda: "127.0.0.1:1")
    cmd.flag |= FORWARDED_FLAG
    assert fw.target(cmd) is None  # already forwarded once
    cmd.flag &= ~FORWARDED_FLAG
    with_port = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)  # accepts, never answers
    port = with_port.sockets[0].getsockname()[1]
    try:
        closed = SendForwarder(lambda: "127.0.0.1:1")
        assert await closed.forward(cmd, "127.0.0.1:1") is None and closed.counters["not_sent"] == 1
        silent = SendForwarder(lambda: f"127.0.0.1:{port}", timeout_s=0.3)
        answer = await silent.forward(cmd, f"127.0.0.1:{port}")
        assert answer is not None and answer.code == R.SYSTEM_ERROR and "outcome unknown" in (answer.remark or "")
        assert f"127.0.0.1:{port}" in (answer.remark or "") and silent.inflight == 0
        await silent.close()
    finally:
        with_port.close()
        await with_port.wait_closed()
