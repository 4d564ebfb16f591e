"""Issue 24.7 with real ``mqbroker`` processes: a member refused for a diverging configuration is unhealthy.

Rules: three DLedger brokers on fresh stores, n2 with another ``mappedFileSizeCommitLog``. Its
peers refuse it in the handshake (issue 13.7), n0 and n1 elect a leader; n2 reaches no majority,
so its ``/health`` answers 503 naming the refusal (both values, the key) and a fix (``/status``:
``healthy`` false), while n0 and n1 answer 200.
"""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tools.procs import wait_until
from tools.broker_confs import dledger_group_confs
from tools.nodes import BrokerProc

pytestmark = pytest.mark.multiprocess


def health(port: int) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def group(tmp: Path, sizes: list[int]) -> list[BrokerProc]:
    confs = dledger_group_confs(tmp, per_member=lambda i: {"mappedFileSizeCommitLog": sizes[i]})
    return [BrokerProc(conf, port, f"n{i}", tmp) for i, (conf, port) in enumerate(confs)]


@pytest.mark.timeout(120)
def test_a_member_refused_for_its_configuration_answers_503(tmp_path: Path) -> None:
    procs = group(tmp_path, [1 << 20, 1 << 20, 2 << 20])
    try:
        for p in procs:
            p.start(timeout=60)
        code, body = wait_until(lambda: (lambda h: h if h[0] == 503 else None)(health(procs[2].api_port)), 20,
                                "n2 /health 503")
        assert "differs" in body["error"] and "mappedFileSizeCommitLog" in body["error"], body
        assert "cannot serve" in body["error"] and body.get("fix"), body
        assert procs[2].client().status()["healthy"] is False
        wait_until(lambda: any(p.client().status().get("isMaster") for p in procs[:2]), 20, "a master among n0, n1")
        assert health(procs[0].api_port)[0] == 200 and health(procs[1].api_port)[0] == 200
    finally:
        for p in procs:
            p.stop()
