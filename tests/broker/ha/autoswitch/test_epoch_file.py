"""EpochFileCache and its CheckpointFile (Apache 5.3.3 format), the rules of
docs/en/controller/design.md ("Log replication", "Truncation algorithm")."""
from __future__ import annotations

import zlib
from pathlib import Path

import pytest

from broker.ha.autoswitch.checkpoint_file import (
    MAX_CHECKPOINT_BYTES,
    CheckpointFile,
    CheckpointFileError,
    CorruptCheckpoint,
    decode_checkpoint,
    encode_checkpoint,
    java_crc32,
)
from broker.ha.autoswitch.epoch_file import (
    EPOCH_FILE_NAME,
    EpochEntry,
    EpochEntryCodec,
    EpochFileCache,
    find_consistent_point,
)

LONG_MAX = 2 ** 63 - 1
# CheckpointFile's own Javadoc example: 2 entries, crc 773307083, "7-7000", "8-8000"
APACHE_EXAMPLE = b"2\n773307083\n7-7000\n8-8000\n"


def cache_1_2_3(path: Path | None = None) -> EpochFileCache:
    c = EpochFileCache(path)
    assert c.append_entry(EpochEntry(1, 100))
    assert c.append_entry(EpochEntry(2, 300))
    assert c.append_entry(EpochEntry(3, 500))
    return c


# ---------------------------------------------------------------- format
def test_format_is_apaches_javadoc_example() -> None:
    assert encode_checkpoint(["7-7000", "8-8000"]) == APACHE_EXAMPLE
    assert decode_checkpoint(APACHE_EXAMPLE, EpochEntryCodec()) == [EpochEntry(7, 7000), EpochEntry(8, 8000)]


def test_crc_is_java_crc32_masked_to_a_positive_int() -> None:
    data = b"1-0\n"
    assert java_crc32(data) == zlib.crc32(data) & 0x7FFFFFFF
    assert all(java_crc32(bytes([b])) >= 0 for b in range(256))


def test_written_file_bytes_and_bak_of_previous(tmp_path: Path) -> None:
    p = tmp_path / EPOCH_FILE_NAME
    c = EpochFileCache(p)
    assert c.append_entry(EpochEntry(7, 7000))
    first = p.read_bytes()
    assert first == b"1\n%d\n7-7000\n" % (zlib.crc32(b"7-7000\n") & 0x7FFFFFFF)
    assert c.append_entry(EpochEntry(8, 8000))
    assert p.read_bytes() == APACHE_EXAMPLE
    assert (tmp_path / (EPOCH_FILE_NAME + ".bak")).read_bytes() == first
    assert not (tmp_path / (EPOCH_FILE_NAME + ".tmp")).exists()


def test_reader_accepts_crlf_and_unterminated_last_line_and_zero_crc() -> None:
    codec = EpochEntryCodec()
    assert decode_checkpoint(b"2\r\n773307083\r\n7-7000\r\n8-8000", codec) == [EpochEntry(7, 7000), EpochEntry(8, 8000)]
    assert decode_checkpoint(b"1\n0\n9-1\n", codec) == [EpochEntry(9, 1)]  # crc 0: not checked


@pytest.mark.parametrize("data, why", [
    (b"", "empty"),
    (b"2\n", "torn after the count"),
    (b"3\n773307083\n7-7000\n8-8000\n", "count says 3"),
    (b"2\n773307084\n7-7000\n8-8000\n", "crc off by one"),
    (b"2\n773307083\n7-7000\n8-8001\n", "entry changed, crc kept"),
    (b"2\n 773307083\n7-7000\n8-8000\n", "space before a number (Java's parseInt refuses it)"),
    (b"2\n773_307_083\n7-7000\n8-8000\n", "underscores (Python's int() would take them)"),
    (b"x\n0\n", "count not a number"),
    (b"1\n0\na-b\n", "entry not numbers"),
    (b"1\n0\n7--5\n", "three pieces: not an entry, so the count fails"),
    (b"1\n0\n\xff-1\n", "not UTF-8"),
    (b"1\n0\n1-99999999999999999999\n", "offset beyond a Java long"),
    (b"1\n0\n" + b"1" * 5000 + b"-1\n", "a line longer than any entry"),
])
def test_corrupt_content_is_refused(data: bytes, why: str) -> None:
    with pytest.raises(CorruptCheckpoint):
        decode_checkpoint(data, EpochEntryCodec())


def test_oversized_file_is_refused_before_parsing() -> None:
    with pytest.raises(CorruptCheckpoint, match="more than"):
        decode_checkpoint(b"1" * (MAX_CHECKPOINT_BYTES + 1), EpochEntryCodec())


def test_java_split_drops_trailing_empty_pieces() -> None:
    assert EpochEntryCodec().from_line("7-7000-") == EpochEntry(7, 7000)
    assert EpochEntryCodec().from_line("7-") is None


# ---------------------------------------------------------------- .bak fallback and errors
def test_torn_main_falls_back_to_bak_and_says_so(tmp_path: Path) -> None:
    p = tmp_path / EPOCH_FILE_NAME
    cache_1_2_3(p)  # main: 1,2,3; bak: 1,2
    p.write_bytes(p.read_bytes()[:7])
    c = EpochFileCache(p)
    got = c.init_cache_from_file()
    assert got.source == "bak" and got.main_error
    assert c.get_all_entries() == [EpochEntry(1, 100, 300), EpochEntry(2, 300)]


def test_main_without_entries_falls_back_to_bak_as_apache(tmp_path: Path) -> None:
    p = tmp_path / EPOCH_FILE_NAME
    (tmp_path / (EPOCH_FILE_NAME + ".bak")).write_bytes(APACHE_EXAMPLE)
    c = EpochFileCache(p)
    assert c.init_cache_from_file().source == "bak"
    assert c.last_epoch() == 8


def test_corrupt_main_and_corrupt_bak_name_both_files_and_the_fix(tmp_path: Path) -> None:
    p = tmp_path / EPOCH_FILE_NAME
    p.write_bytes(b"2\n1\n1-1\n")
    (tmp_path / (EPOCH_FILE_NAME + ".bak")).write_bytes(b"garbage")
    with pytest.raises(CheckpointFileError) as e:
        EpochFileCache(p).init_cache_from_file()
    msg = str(e.value)
    assert str(p) in msg and EPOCH_FILE_NAME + ".bak" in msg and "delete" in msg


def test_corrupt_main_without_bak_is_an_error_not_an_empty_history(tmp_path: Path) -> None:
    p = tmp_path / EPOCH_FILE_NAME
    p.write_bytes(b"2\n773307083\n7-7000\n")
    with pytest.raises(CheckpointFileError, match=EPOCH_FILE_NAME):
        EpochFileCache(p).init_cache_from_file()


def test_no_file_is_an_empty_history(tmp_path: Path) -> None:
    c = EpochFileCache(tmp_path / EPOCH_FILE_NAME)
    assert c.init_cache_from_file().source == "none"
    assert c.entry_size == 0 and c.last_epoch() == -1 and c.last_entry() is None


def test_out_of_order_file_is_an_error_naming_it(tmp_path: Path) -> None:
    p = tmp_path / EPOCH_FILE_NAME
    p.write_bytes(encode_checkpoint(["8-8000", "7-7000"]))
    with pytest.raises(CheckpointFileError, match="out of order"):
        EpochFileCache(p).init_cache_from_file()


def test_emptied_cache_does_not_come_back_from_disk(tmp_path: Path) -> None:
    p = tmp_path / EPOCH_FILE_NAME
    c = cache_1_2_3(p)
    c.truncate_suffix_by_offset(0)
    assert c.entry_size == 0
    assert not p.exists() and not (tmp_path / (EPOCH_FILE_NAME + ".bak")).exists()
    again = EpochFileCache(p)
    again.init_cache_from_file()
    assert again.entry_size == 0


def test_checkpoint_file_round_trip(tmp_path: Path) -> None:
    f = CheckpointFile(tmp_path / "x", EpochEntryCodec())
    f.write([EpochEntry(1, 0), EpochEntry(5, 10)])
    assert f.read().entries == [EpochEntry(1, 0), EpochEntry(5, 10)]


# ---------------------------------------------------------------- cache rules (EpochFileCacheTest's cases)
def test_reload_derives_end_offsets(tmp_path: Path) -> None:
    p = tmp_path / EPOCH_FILE_NAME
    cache_1_2_3(p)
    c = EpochFileCache(p)
    assert c.init_cache_from_file().source == "main"
    assert c.get_entry(2) == EpochEntry(2, 300, 500)
    assert c.last_entry() == EpochEntry(3, 500, LONG_MAX)


@pytest.mark.parametrize("entry", [EpochEntry(3, 600), EpochEntry(2, 600), EpochEntry(4, 500), EpochEntry(4, 400)])
def test_append_refuses_an_epoch_or_offset_that_does_not_grow(entry: EpochEntry) -> None:
    c = cache_1_2_3()
    assert not c.append_entry(entry)
    assert c.get_all_entries() == [EpochEntry(1, 100, 300), EpochEntry(2, 300, 500), EpochEntry(3, 500)]


def test_find_by_offset_and_epoch() -> None:
    c = cache_1_2_3()
    assert c.find_epoch_entry_by_offset(350) == EpochEntry(2, 300, 500)
    assert c.find_epoch_entry_by_offset(500) == EpochEntry(3, 500)
    assert c.find_epoch_entry_by_offset(99) is None
    assert c.get_entry(4) is None
    assert c.next_entry(1) == EpochEntry(2, 300, 500) and c.next_entry(3) is None
    assert c.first_entry() == EpochEntry(1, 100, 300) and c.last_epoch() == 3


def test_truncate_suffix_by_offset_reopens_the_last_epoch(tmp_path: Path) -> None:
    p = tmp_path / EPOCH_FILE_NAME
    c = cache_1_2_3(p)
    c.truncate_suffix_by_offset(150)
    assert c.get_all_entries() == [EpochEntry(1, 100, LONG_MAX)]
    assert p.read_bytes() == encode_checkpoint(["1-100"])


def test_truncate_suffix_by_epoch() -> None:
    c = cache_1_2_3()
    c.truncate_suffix_by_epoch(3)
    assert c.get_all_entries() == [EpochEntry(1, 100, 300), EpochEntry(2, 300, LONG_MAX)]


def test_truncate_prefix_by_offset_drops_epochs_that_end_before() -> None:
    c = cache_1_2_3()
    c.truncate_prefix_by_offset(300)
    assert [e.epoch for e in c.get_all_entries()] == [2, 3]
    c.truncate_prefix_by_offset(499)
    assert [e.epoch for e in c.get_all_entries()] == [2, 3]


def test_set_last_end_offset_ignored_below_start() -> None:
    c = cache_1_2_3()
    c.set_last_epoch_entry_end_offset(400)
    assert c.last_entry() == EpochEntry(3, 500)
    c.set_last_epoch_entry_end_offset(700)
    assert c.last_entry() == EpochEntry(3, 500, 700)


def _cache(*entries: tuple[int, int], end: int | None = None) -> EpochFileCache:
    c = EpochFileCache()
    for epoch, start in entries:
        assert c.append_entry(EpochEntry(epoch, start))
    if end is not None:
        c.set_last_epoch_entry_end_offset(end)
    return c


@pytest.mark.parametrize("local, peer, point", [
    # the four samples of Apache's EpochFileCacheTest
    (_cache((1, 100), (2, 300), (3, 500)), _cache((1, 100), (2, 300), (3, 450)), 450),
    (_cache((1, 100), (2, 300), (3, 500), end=700), _cache((1, 100), (2, 300), (3, 500), end=600), 600),
    (_cache((1, 100), (2, 300), (3, 500), end=700), _cache((1, 200), (2, 500)), -1),
    (_cache((1, 100), (2, 300), (3, 500), (4, 800)), _cache((1, 100), (2, 300), (3, 500), end=700), 700),
    # a slave whose last epoch the master never had: truncate to where the common epoch ends
    (_cache((1, 0), (2, 100), (3, 150), end=180), _cache((1, 0), (2, 100), (4, 120), end=300), 120),
])
def test_consistent_point_is_the_smaller_end_of_the_last_common_epoch(
        local: EpochFileCache, peer: EpochFileCache, point: int) -> None:
    assert local.find_consistent_point(peer) == point
    assert find_consistent_point(local.get_all_entries(), peer.get_all_entries()) == point


def test_init_from_entries_keeps_the_last_end() -> None:
    c = EpochFileCache()
    c.init_cache_from_entries([EpochEntry(1, 0, 50), EpochEntry(2, 50, 90)])
    assert c.get_all_entries() == [EpochEntry(1, 0, 50), EpochEntry(2, 50, 90)]
