"""Per-pull transfer caps (issue 23.5): Apache's ``isTheBatchFull`` rules and the store's read loop
applying them, on Apache's own classic store (625 messages of 200-1000 body bytes per queue)."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from broker.config.broker_config import BrokerConfig
from broker.store.message_store import DefaultMessageStore, GetMessageStatus
from broker.store.transfer_limits import TransferLimits
from tests.broker.store.test_message_store import FIXTURE_SETTINGS, open_store
from tests.support import rmqfixtures as rf

PLAIN = rf.SETS["plain"]


def apache_batch(sizes: list[int], max_num: int, byte_cap: int, count_cap: int) -> int:
    """How many messages Apache's getMessage serves from ``sizes`` (written from its Java, 4.9.8)."""
    total = count = 0
    for size in sizes:
        if total and count and (max_num <= count or total + size > byte_cap or count > count_cap - 1):
            break
        total += size
        count += 1
    return count


def test_batch_full_rules() -> None:
    lim = TransferLimits(bytes_in_memory=100, count_in_memory=3, bytes_in_disk=50, count_in_disk=2, memory_window=1000)
    assert not lim.batch_full(10_000, 32, 0, 0, False)  # the first message always goes, however big
    assert lim.batch_full(1, 32, 100, 1, False) and not lim.batch_full(1, 32, 99, 1, False)
    assert lim.batch_full(1, 32, 10, 3, False) and not lim.batch_full(1, 32, 10, 2, False)
    assert lim.batch_full(1, 2, 10, 2, False)  # maxMsgNums
    assert lim.batch_full(1, 32, 50, 1, True) and lim.batch_full(1, 32, 10, 2, True)
    assert lim.in_disk(0, 1001) and not lim.in_disk(1, 1001)
    defaults = TransferLimits.remoting(None)
    assert (defaults.bytes_in_memory, defaults.count_in_memory, defaults.bytes_in_disk, defaults.count_in_disk) == (
        256 * 1024, 32, 64 * 1024, 8)
    conf = SimpleNamespace(max_transfer_bytes_on_message_in_memory=1000, max_transfer_count_on_message_in_memory=4,
                           max_transfer_bytes_on_message_in_disk=500, max_transfer_count_on_message_in_disk=2,
                           access_message_in_memory_max_ratio=0, http_pull_max_bytes=777)
    mine = TransferLimits.remoting(conf)
    assert (mine.bytes_in_memory, mine.count_in_memory, mine.bytes_in_disk, mine.count_in_disk, mine.memory_window) == (
        1000, 4, 500, 2, 0)
    assert TransferLimits.http(conf).bytes_in_memory == 777


def _sizes(store: DefaultMessageStore, topic: str, queue_id: int, offset: int, n: int) -> list[int]:
    return [m.store_size for m in store.get_message(topic, queue_id, offset, n, limits=TransferLimits(
        bytes_in_memory=1 << 40, count_in_memory=1 << 20)).messages]


def test_store_read_loop_applies_apache_caps(store_copy, manifests) -> None:
    store = open_store(store_copy(PLAIN.classic))
    try:
        all_sizes = _sizes(store, "TopicA", 1, 0, 1024)
        assert len(all_sizes) == 625
        # in memory (the whole store is far less than 40 % of RAM): 32 messages or 256 KiB
        for offset, max_num in ((0, 32), (0, 64), (100, 512), (620, 32), (3, 5)):
            got = store.get_message("TopicA", 1, offset, max_num, limits=TransferLimits.remoting())
            want = apache_batch(all_sizes[offset:], max_num, 256 * 1024, 32)
            assert got.status is GetMessageStatus.FOUND and got.message_count == want, (offset, max_num)
            assert got.next_begin_offset == offset + want
        # in disk (accessMessageInMemoryMaxRatio=0): 8 messages or 64 KiB
        disk = TransferLimits.remoting(SimpleNamespace(access_message_in_memory_max_ratio=0))
        got = store.get_message("TopicA", 1, 0, 32, limits=disk)
        assert got.message_count == apache_batch(all_sizes, 32, 64 * 1024, 8) == 8
        # a byte cap smaller than one message: still one message, and the next pull goes on from it
        tiny = TransferLimits(bytes_in_memory=10, bytes_in_disk=10)
        got = store.get_message("TopicA", 1, 7, 32, limits=tiny)
        assert got.message_count == 1 and got.next_begin_offset == 8
        # filtered-out units cost nothing against the caps: they are skipped and the read goes on
        got = store.get_message("TopicA", 1, 0, 32, tags_filter=lambda code: False, limits=TransferLimits.remoting())
        assert got.status is GetMessageStatus.NO_MATCHED_MESSAGE and got.next_begin_offset == 625
        # no limits given (the HTTP door): httpPullMaxBytes, 4 MiB, so this whole queue in one read
        assert store.get_message("TopicA", 1, 0, 1024).message_count == 625
    finally:
        store.shutdown()


def test_http_byte_cap_comes_from_the_broker_config(store_copy) -> None:
    root: Path = store_copy(PLAIN.classic)
    store = DefaultMessageStore(store_path_root_dir=str(root), broker_config=BrokerConfig(http_pull_max_bytes=4096),
                                **FIXTURE_SETTINGS)
    store.load()
    store.start()
    try:
        got = store.get_message("TopicA", 1, 0, 1024)
        assert 1 <= got.message_count and sum(m.store_size for m in got.messages) <= 4096
        assert got.next_begin_offset == got.message_count
    finally:
        store.shutdown()
