"""Driver of the Apache rocketmq-client-cpp (PyPI ``rocketmq`` 0.4.4, ctypes over librocketmq):
one process per role, JSON lines on stdout, so a crash of the native library cannot take the
test runner with it.

    python -m tests.remoting.cpp_client produce <namesrv> <topic> <n> [delayLevel]
        -> {"ack": i, "msgId", "offset", "status"} per send, then {"done": n}
    python -m tests.remoting.cpp_client consume <namesrv> <topic> <group> <expr> [fail_first]
        -> {"ready": true}, then {"msg": {...}} per delivery; with fail_first the callback answers
           RECONSUME_LATER to each message's first delivery (the client sends it back for a
           redelivery); "close" on stdin shuts it down -> {"closed": true}
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time

from rocketmq.client import Message, Producer, PushConsumer, RecvMessage, _CConsumeStatus, dll, ffi_check


_OUT = threading.Lock()
# JSON lines go to a private copy of stdout; fd 1 itself goes to stderr (the log), so whatever the
# native library prints cannot land inside one of our lines
_LINES = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)


def out(obj: dict) -> None:
    """One JSON line; callbacks run on several client threads, so lines must not interleave."""
    line = json.dumps(obj) + "\n"
    with _OUT:
        _LINES.write(line)
        _LINES.flush()


def produce(namesrv: str, topic: str, n: int, delay_level: int = 0) -> None:
    p = Producer("PID_cpp_e2e", timeout=6000)
    p.set_namesrv_addr(namesrv)
    p.start()
    try:
        for i in range(n):
            m = Message(topic)
            m.set_keys(f"key-{i}")
            m.set_tags(f"Tag{'ABC'[i % 3]}")
            m.set_body(f"body-{i}")
            if delay_level:
                m.set_delay_time_level(delay_level)
            for attempt in range(20):  # a route may not be there yet right after start
                try:
                    r = p.send_sync(m)
                    out({"ack": i, "msgId": r.msg_id, "offset": r.offset, "status": int(r.status),
                         "t": int(time.time() * 1000)})
                    break
                except Exception as exc:  # noqa: BLE001 - reported, retried a bounded number of times
                    out({"fail": i, "error": str(exc)[:300]})
                    time.sleep(0.5)
        out({"done": n})
    finally:
        p.shutdown()


def consume(namesrv: str, topic: str, group: str, expr: str, fail_first: bool = False) -> None:
    c = PushConsumer(group)
    c.set_namesrv_addr(namesrv)
    c.set_thread_count(2)
    seen: set[str] = set()
    lock = threading.Lock()

    def on_message(msg) -> int:  # noqa: ANN001 - RecvMessage
        body = msg.body.decode("utf-8", "replace")
        first = False
        with lock:
            if body not in seen:
                seen.add(body)
                first = True
        out({"msg": {"msgId": msg.id, "topic": msg.topic, "tags": msg.tags.decode() if msg.tags else "",
                     "keys": msg.keys.decode() if msg.keys else "", "body": body, "queueId": msg.queue_id,
                     "queueOffset": msg.queue_offset, "reconsumeTimes": msg.reconsume_times,
                     "storeTimestamp": msg.store_timestamp, "bornTimestamp": msg.born_timestamp,
                     "t": int(time.time() * 1000), "failed": fail_first and first}})
        if fail_first and first:
            return int(_CConsumeStatus.RECONSUME_LATER.value)  # ask for a redelivery
        return int(_CConsumeStatus.CONSUME_SUCCESS.value)

    # Not PushConsumer.subscribe's wrapper: in 0.4.4 a callback that raises is re-raised from the
    # ctypes callback ("Exception ignored"), so the status the native client sees is undefined.
    # The same native calls, with the status returned explicitly.
    ffi_check(dll.Subscribe(c._handle, topic.encode(), expr.encode()))
    c._register_callback(lambda _consumer, handle: on_message(RecvMessage(handle)))
    c.start()
    out({"ready": True})
    try:
        for line in sys.stdin:
            if line.strip() == "close":
                break
    finally:
        c.shutdown()
        out({"closed": True})


def main(argv: list[str]) -> None:
    mode = argv[0]
    if mode == "produce":
        produce(argv[1], argv[2], int(argv[3]), int(argv[4]) if len(argv) > 4 else 0)
    elif mode == "consume":
        consume(argv[1], argv[2], argv[3], argv[4], len(argv) > 5 and argv[5] == "fail_first")
    else:
        raise SystemExit("mode must be produce or consume")


if __name__ == "__main__":
    main(sys.argv[1:])
