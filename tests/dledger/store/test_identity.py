"""Issue 13.7: a DLedger store records its group, member and file sizes and refuses others."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest

from dledger.config import DLedgerConfig
from dledger.store.identity import IDENTITY_FILE, StoreIdentityError
from dledger.storelog import open_store

BROKER_KEYS = {"group": "dLegerGroup", "self_id": "dLegerSelfId", "broker_name": "brokerName",
               "data_file_size": "mappedFileSizeCommitLog"}


def cfg(base: Path, **kw) -> DLedgerConfig:
    d = dict(group="g", self_id="n0", peers="n0-127.0.0.1:1", store_base_dir=str(base),
             mapped_file_size_for_entry_data=1 << 20, mapped_file_size_for_entry_index=32 * 1024)
    d.update(kw)
    return DLedgerConfig(**d)


def write_some(c: DLedgerConfig, n: int = 5) -> None:
    store = open_store(c)
    for i in range(n):
        store.append_as_leader(b"entry-%d" % i, 1)
    store.shutdown()


def test_first_start_records_identity(tmp_path: Path) -> None:
    write_some(cfg(tmp_path, broker_name="broker-a"))
    text = (tmp_path / "dledger-n0" / IDENTITY_FILE).read_text()
    assert text == ("group=g\nselfId=n0\nbrokerName=broker-a\nmappedFileSizeForEntryData=1048576\n"
                    "mappedFileSizeForEntryIndex=32768\n")


@pytest.mark.parametrize("change, expect", [
    ({"group": "other"}, "records group group=g but this member is configured with other (dLegerGroup); "
                         "set dLegerGroup=g"),
    ({"broker_name": "broker-b"}, "records broker name brokerName=broker-a but this member is configured with "
                                  "broker-b (brokerName); set brokerName=broker-a"),
    ({"mapped_file_size_for_entry_data": 2 << 20},
     "records data file size mappedFileSizeForEntryData=1048576 but this member is configured with 2097152 "
     "(mappedFileSizeCommitLog); set mappedFileSizeCommitLog=1048576"),
])
def test_a_different_group_broker_or_file_size_is_refused(tmp_path: Path, change: dict, expect: str) -> None:
    write_some(cfg(tmp_path, broker_name="broker-a", conf_keys=BROKER_KEYS))
    with pytest.raises(StoreIdentityError) as err:
        open_store(cfg(tmp_path, **{"broker_name": "broker-a", "conf_keys": BROKER_KEYS, **change}))
    msg = str(err.value)
    assert str(tmp_path / "dledger-n0" / IDENTITY_FILE) in msg and expect in msg
    # nothing was touched: the right configuration still opens every entry
    store = open_store(cfg(tmp_path, broker_name="broker-a", conf_keys=BROKER_KEYS))
    assert store.ledger_end_index == 4
    store.shutdown()


def test_standalone_member_names_cli_flags(tmp_path: Path) -> None:
    write_some(cfg(tmp_path))
    with pytest.raises(StoreIdentityError, match=r"set --group \(group\)=g"):
        open_store(cfg(tmp_path, group="h"))


def test_existing_store_without_identity_adopts_once(tmp_path: Path, caplog) -> None:
    write_some(cfg(tmp_path))
    ident = tmp_path / "dledger-n0" / IDENTITY_FILE
    ident.unlink()  # an Apache store, or one upgraded in place / written by an older version
    with caplog.at_level(logging.WARNING, logger="dledger.store.identity"):
        store = open_store(cfg(tmp_path, broker_name="broker-z"))
        store.shutdown()
    assert "existing store had no identity; adopted group=g, selfId=n0, brokerName=broker-z" in caplog.text
    assert "brokerName=broker-z" in ident.read_text()
    with pytest.raises(StoreIdentityError):  # adopted once, then enforced
        open_store(cfg(tmp_path, broker_name="broker-y"))


def test_failed_open_records_nothing(tmp_path: Path) -> None:
    """A store that cannot open for another reason (wrong file size, no identity yet) adopts nothing."""
    write_some(cfg(tmp_path))
    ident = tmp_path / "dledger-n0" / IDENTITY_FILE
    ident.unlink()
    with pytest.raises(Exception):
        open_store(cfg(tmp_path, mapped_file_size_for_entry_data=2 << 20))
    assert not ident.exists()
