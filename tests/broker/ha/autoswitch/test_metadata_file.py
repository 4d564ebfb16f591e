"""brokerIdentity / brokerIdentity-temp (Apache 5.3.3 BrokerMetadata, TempBrokerMetadata),
docs/en/controller/persistent_unique_broker_id.md."""
from __future__ import annotations

from pathlib import Path

import pytest

from broker.ha.autoswitch.metadata_file import (
    BrokerMetadata,
    MetadataFileError,
    TempBrokerMetadata,
    broker_metadata_file,
    temp_broker_metadata_file,
)


def test_broker_identity_bytes(tmp_path: Path) -> None:
    f = broker_metadata_file(tmp_path)
    f.write(BrokerMetadata("DefaultCluster", "broker-a", 2))
    assert (tmp_path / "brokerIdentity").read_bytes() == b"DefaultCluster#broker-a#2"
    assert f.read() == BrokerMetadata("DefaultCluster", "broker-a", 2)
    assert not (tmp_path / "brokerIdentity.bak").exists() and not (tmp_path / "brokerIdentity.tmp").exists()


def test_temp_identity_bytes_and_address(tmp_path: Path) -> None:
    f = temp_broker_metadata_file(tmp_path)
    t = TempBrokerMetadata("DefaultCluster", "broker-a", 1, "127.0.0.1:30911;1700000000000")
    f.write(t)
    assert (tmp_path / "brokerIdentity-temp").read_bytes() == b"DefaultCluster#broker-a#1#127.0.0.1:30911;1700000000000"
    got = f.read()
    assert got == t and got is not None and got.broker_address == "127.0.0.1:30911"
    f.clear()
    assert not f.exists() and f.read() is None


def test_missing_file_is_not_loaded(tmp_path: Path) -> None:
    assert broker_metadata_file(tmp_path).read() is None


def test_java_split_drops_a_trailing_separator() -> None:
    assert BrokerMetadata.decode("c#b#3#") == BrokerMetadata("c", "b", 3)


@pytest.mark.parametrize("content", [b"", b"c#b", b"c#b#x", b"c#b#3#extra", b"c#b#99999999999999999999", b"\xff#b#1"])
def test_unreadable_identity_names_the_file_and_the_fix(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "brokerIdentity").write_bytes(content)
    with pytest.raises(MetadataFileError) as e:
        broker_metadata_file(tmp_path).read()
    assert "brokerIdentity" in str(e.value) and "clusterName#brokerName#brokerId" in str(e.value)


def test_temp_needs_four_fields(tmp_path: Path) -> None:
    (tmp_path / "brokerIdentity-temp").write_bytes(b"c#b#1")
    with pytest.raises(MetadataFileError, match="registerCheckCode"):
        temp_broker_metadata_file(tmp_path).read()


def test_a_field_with_the_separator_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        broker_metadata_file(tmp_path).write(BrokerMetadata("c#x", "b", 1))
    assert not (tmp_path / "brokerIdentity").exists()
