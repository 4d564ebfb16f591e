"""BrokerProcessor before its store is open (or after it closed): a clear SERVICE_NOT_AVAILABLE,
never an AttributeError on ``None`` turned into a 500."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from broker.api import errors as E
from broker.api.errors import BrokerApiError
from broker.processor import BrokerProcessor


def test_a_put_and_a_read_without_a_store_are_service_not_available() -> None:
    controller = SimpleNamespace(broker_ip="127.0.0.1", store_access=None, dledger_enabled=False)
    bp = BrokerProcessor(controller)  # type: ignore[arg-type]
    with pytest.raises(BrokerApiError) as put:
        asyncio.run(bp.send.put([]))  # the one send path both doors go through (broker.send_service)
    with pytest.raises(BrokerApiError) as read:
        bp.view_message_by_offset(0)
    for exc in (put.value, read.value):
        assert exc.code == E.SERVICE_NOT_AVAILABLE and "store is not open" in exc.message
