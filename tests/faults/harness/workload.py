"""Workload of a fault run: concurrent producers and consumers with unique keys, and a status poller.

Rules
-----
* Producer ``p<w>`` sends one message at a time with a fresh key ``p<w>-<i>`` (never resent: a
  retry would be a new key), to a queue drawn from its own seeded RNG, through a
  :class:`MasterFollowingProducer` (follows NOT_MASTER redirects, rotates on connection errors).
  The body is ``key|padding`` and the key is also the ``FKEY`` property.
* Outcomes: a 2xx answer is ``ok`` (with the acknowledged offsets). ``fail`` only where nothing
  can have been stored: the connection was refused, or the broker rejected the request before
  any write (``DEFINITE_FAIL_CODES``), which includes NOT_MASTER and SERVICE_NOT_AVAILABLE: a
  put that lost its leader after the local append answers FLUSH_SLAVE_TIMEOUT ("outcome
  unknown", issue 13.6), so the checker flags any NOT_MASTER/SERVICE_NOT_AVAILABLE key found
  in the log (``failed-present``). Everything else (timeouts, dropped connections,
  FLUSH_SLAVE_TIMEOUT) is ``info``: maybe stored.
* Consumer ``c<k>`` pulls every queue from a random node (followers too) from the last offset it
  saw and records each pulled (qoff, phys, key) as a ``read`` event; the checker then demands
  that the final log holds exactly that at that place (no dirty reads).
* The status poller samples every live node's ``/status`` (role, term, leader, indexes) into
  ``statuses.jsonl`` for election-safety checking and post-mortems.
* Everything is bounded by a shared stop event; each HTTP call has a timeout.
"""
from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any, Callable, Optional

import aiohttp

from broker.api.client import BrokerClient, BrokerClientError, MasterFollowingProducer

from .cluster import KEY_PROP, QUEUES, TOPIC, Cluster
from .history import History

DEFINITE_FAIL_CODES = {"CONNECT_REFUSED", "MESSAGE_ILLEGAL", "BAD_REQUEST", "TOPIC_NOT_EXIST", "NO_PERMISSION",
                       "NOT_MASTER", "SERVICE_NOT_AVAILABLE"}


class Workload:
    def __init__(self, cluster: Cluster, history: History, seed: int, producers: int = 3, consumers: int = 1,
                 op_timeout: float = 4.0, think_s: float = 0.01, pad: int = 160,
                 status_path: Optional[Path] = None) -> None:
        self.c, self.h = cluster, history
        self.seed, self.n_prod, self.n_cons = seed, producers, consumers
        self.op_timeout, self.think_s, self.pad = op_timeout, think_s, pad
        self.stop = asyncio.Event()
        self.status_samples: list[dict[str, Any]] = []
        self._status_fh = open(status_path, "a", encoding="utf-8") if status_path else None
        self.acks = 0

    async def run(self) -> None:
        tasks = [self._producer(w) for w in range(self.n_prod)] + [self._consumer(k) for k in range(self.n_cons)]
        tasks.append(self._poller())
        try:
            await asyncio.gather(*tasks)
        finally:
            if self._status_fh is not None:
                self._status_fh.close()

    # ------------------------------------------------------------------ producers
    async def _producer(self, w: int) -> None:
        rng = random.Random(f"{self.seed}:p{w}")
        proc = f"p{w}"
        async with MasterFollowingProducer(self.c.seeds, timeout=self.op_timeout, retry_for=0) as p:
            p.current = self.c.seeds[rng.randrange(len(self.c.seeds))]
            i = 0
            while not self.stop.is_set():
                key = f"{proc}-{i}"
                i += 1
                q = rng.randrange(QUEUES)
                op = self.h.invoke(proc, key, q)
                try:
                    r = await asyncio.wait_for(
                        p.send_once(TOPIC, f"{key}|" + "x" * self.pad, queue_id=q, properties={KEY_PROP: key}),
                        self.op_timeout + 1)
                    self.h.ok(op, r["commitLogOffset"], r["queueId"], r["queueOffset"], self.c.node_of(r["brokerAddress"]))
                    self.acks += 1
                except BrokerClientError as exc:
                    code = exc.code
                    if code == "CONNECT_FAILED" and ("refused" in exc.message.lower() or "Cannot connect" in exc.message):
                        code = "CONNECT_REFUSED"
                    (self.h.fail if code in DEFINITE_FAIL_CODES else self.h.info)(op, code)
                    await asyncio.sleep(0.05)
                except asyncio.TimeoutError:
                    self.h.info(op, "TIMEOUT")
                except Exception as exc:  # noqa: BLE001 - anything else is indeterminate, never silent
                    self.h.info(op, f"{type(exc).__name__}: {exc}"[:200])
                    await asyncio.sleep(0.05)
                await asyncio.sleep(self.think_s)

    # ------------------------------------------------------------------ consumers
    async def _consumer(self, k: int) -> None:
        rng = random.Random(f"{self.seed}:c{k}")
        nxt = [0] * QUEUES
        timeout = aiohttp.ClientTimeout(total=2.0)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while not self.stop.is_set():
                node = rng.choice(self.c.names)
                q = rng.randrange(QUEUES)
                if not self.c.alive(node) or node in self.c.paused:
                    await asyncio.sleep(0.05)
                    continue
                try:
                    res = await BrokerClient(self.c.address(node), session=session).pull(TOPIC, q, nxt[q], 32)
                except (BrokerClientError, asyncio.TimeoutError, aiohttp.ClientError, OSError):
                    await asyncio.sleep(0.1)
                    continue
                msgs = []
                for m in res.get("messages", []):
                    key = (m.get("properties") or {}).get(KEY_PROP)
                    msgs.append([m["queueOffset"], m["commitLogOffset"], key])
                if msgs:
                    self.h.read(f"c{k}", node, q, nxt[q], msgs)
                    nxt[q] = msgs[-1][0] + 1
                await asyncio.sleep(0.05)

    # ------------------------------------------------------------------ status poller
    async def _poller(self, interval: float = 0.25) -> None:
        timeout = aiohttp.ClientTimeout(total=1.0)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while not self.stop.is_set():
                await asyncio.gather(*(self._sample(session, n) for n in self.c.names))
                await asyncio.sleep(interval)

    async def _sample(self, session: aiohttp.ClientSession, n: str) -> None:
        if not self.c.alive(n) or n in self.c.paused:
            return
        try:
            st = await BrokerClient(self.c.address(n), session=session).status()
        except (BrokerClientError, asyncio.TimeoutError, aiohttp.ClientError, OSError, ValueError):
            return
        d = st.get("dledger") or {}
        sample = {"t": self.h.now(), "node": n, "role": d.get("role"), "term": d.get("term"), "leader": d.get("leaderId"),
                  "isMaster": st.get("isMaster"), "end": d.get("endIndex"), "committed": d.get("committedIndex"),
                  "maxOffset": (st.get("commitLog") or {}).get("maxOffset")}
        self.status_samples.append(sample)
        if self._status_fh is not None:
            self._status_fh.write(json.dumps(sample) + "\n")


async def wait_for(pred: Callable[[], Any], timeout: float, interval: float = 0.1) -> Any:
    """Poll a blocking predicate in a worker thread until truthy or ``timeout``; returns the last value."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last = None
    while loop.time() < deadline:
        last = await asyncio.to_thread(pred)
        if last:
            return last
        await asyncio.sleep(interval)
    return last
