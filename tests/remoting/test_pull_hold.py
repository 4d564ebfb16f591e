"""PullRequestHoldService bounds (issue 23.5): suspend clamp, count caps per connection and in all,
the held-bytes cap, and a closed connection's pulls released at once."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

from broker.remoting.processors.pull_hold import PullRequestHoldService, request_bytes


def test_suspend_is_clamped() -> None:
    hold = PullRequestHoldService(max_suspend_millis=30_000)
    assert hold.suspend_millis(3_600_000) == 30_000 and hold.suspend_millis(15_000) == 15_000
    assert hold.suspend_millis(-5) == 0
    conf = SimpleNamespace(long_polling_max_suspend_millis=100, long_polling_max_held_per_connection=2,
                           long_polling_max_held=3, long_polling_max_held_bytes=1000)
    st = PullRequestHoldService.from_config(conf).status()
    assert (st["maxSuspendMillis"], st["maxHeldPerConnection"], st["maxHeld"], st["maxHeldBytes"]) == (100, 2, 3, 1000)


def test_caps_and_close_release() -> None:
    async def run() -> None:
        hold = PullRequestHoldService(max_held_per_connection=2, max_held=3, max_held_bytes=1000)
        hold.attach(asyncio.get_running_loop())
        a, b = object(), object()
        tasks = []
        for conn in (a, a, b):
            assert hold.admit(conn, 100)
            tasks.append(asyncio.ensure_future(hold.wait("T", 0, 3600, lambda: False, conn, 100)))
            await asyncio.sleep(0)
        assert hold.held == 3 and hold.held_by(a) == 2 and hold.status()["heldBytes"] == 300
        assert not hold.admit(a) and not hold.admit(object())  # per connection, then in all
        assert hold.status()["refused"] == 2
        hold.on_close(a)  # the connection left: its pulls return at once
        await asyncio.wait_for(asyncio.gather(*tasks[:2]), 1)
        assert hold.held == 1 and hold.held_by(a) == 0 and not tasks[2].done()
        assert not hold.admit(b, 901) and hold.admit(b, 900)  # bytes
        hold.on_dispatch([SimpleNamespace(topic="T", queue_id=0)])  # a message arrived
        await asyncio.wait_for(tasks[2], 1)
        assert hold.held == 0 and hold.status()["heldBytes"] == 0 and not hold._by_conn and not hold._waiters

    asyncio.run(run())


def test_request_bytes_counts_fields_and_body() -> None:
    cmd = SimpleNamespace(body=b"x" * 10, remark=None, ext_fields={"topic": "T" * 5, "queueId": "1", "n": 3})
    assert request_bytes(cmd) == 10 + len("topic") + 5 + len("queueId") + 1 + len("n") + 8
