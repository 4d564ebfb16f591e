"""One status vocabulary for a put (issue 26.2): the store's ``PutMessageStatus`` travels to the
doors unchanged (a refused put is ``PutRefused``), and each door has exactly one table from a
status to its answer. Driven with a real store that refuses (a SLAVE, an oversized message)."""
from __future__ import annotations

from pathlib import Path

import pytest

from broker.api import errors as E
from broker.remoting.codes import ResponseCode as R
from broker.remoting.processors.send import PUT_STATUS_REMOTING
from broker.store.message import MessageExt
from broker.store.message_store import open_store
from broker.store.put_result import PutMessageStatus, PutRefused
from broker.store_access import StoreAccess


def test_each_door_has_one_answer_for_every_status() -> None:
    assert set(PUT_STATUS_REMOTING) == set(PutMessageStatus)
    assert set(E.PUT_STATUS_HTTP) == set(PutMessageStatus) - {PutMessageStatus.PUT_OK}
    for status in (PutMessageStatus.FLUSH_DISK_TIMEOUT, PutMessageStatus.FLUSH_SLAVE_TIMEOUT,
                   PutMessageStatus.SLAVE_NOT_AVAILABLE):  # stored, not durable: the status's own name and code
        assert E.PUT_STATUS_HTTP[status] == status.value
        assert PUT_STATUS_REMOTING[status] == getattr(R, status.value)
    assert E.HTTP_STATUS[E.PUT_STATUS_HTTP[PutMessageStatus.MESSAGE_ILLEGAL]] == 400
    assert PUT_STATUS_REMOTING[PutMessageStatus.OS_PAGECACHE_BUSY] == R.SYSTEM_ERROR  # as 4.9.8


@pytest.mark.parametrize("case", ["slave", "oversized"])
async def test_a_refused_put_reaches_the_doors_as_its_status(tmp_path: Path, case: str) -> None:
    store = open_store(tmp_path / "s", mapped_file_size_commit_log=1 << 20, max_message_size=1024,
                       broker_role="SLAVE" if case == "slave" else "ASYNC_MASTER")
    try:
        access = StoreAccess(store, last_exit_ok=True)
        body = b"x" * (4096 if case == "oversized" else 10)
        with pytest.raises(PutRefused) as refused:
            await access.put_messages([MessageExt("T", body)], producer_keys=False)
        expected = PutMessageStatus.SERVICE_NOT_AVAILABLE if case == "slave" else PutMessageStatus.MESSAGE_ILLEGAL
        assert refused.value.status is expected and refused.value.detail
        err = E.put_refused(refused.value)  # the HTTP door's answer
        assert (err.code, err.http_status) == ((E.SERVICE_NOT_AVAILABLE, 503) if case == "slave"
                                               else (E.MESSAGE_ILLEGAL, 400))
        assert PUT_STATUS_REMOTING[refused.value.status] == (R.SERVICE_NOT_AVAILABLE if case == "slave"
                                                             else R.MESSAGE_ILLEGAL)
    finally:
        store.shutdown()
