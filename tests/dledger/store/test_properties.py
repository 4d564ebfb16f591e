"""Java-properties parsing/writing, the safe write with .bak, and the currterm/checkpoint files."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from dledger.store.properties import (PropertiesError, format_properties, parse_properties, read_properties_file,
                                      write_file_safely, write_properties_file)
from dledger.store.state_files import CheckpointFile, MemberStateFile


def test_format_is_properties2string() -> None:
    assert format_properties([("voteLeader", ""), ("currTerm", 3)]) == "voteLeader=\ncurrTerm=3\n"
    assert format_properties({"a": 1, "skip": None}) == "a=1\n"


@pytest.mark.parametrize("text, expected", [
    ("currTerm=0\nvoteLeader=n0\n", {"currTerm": "0", "voteLeader": "n0"}),
    ("# comment\n! other comment\n\n  key = value  \n", {"key": "value  "}),
    ("a:b\nc d\ne\t=\tf\n", {"a": "b", "c": "d", "e": "f"}),
    ("empty=\nbare\n", {"empty": "", "bare": ""}),
    ("multi=one \\\n    two\\\n  three\n", {"multi": "one twothree"}),
    ("esc=tab\\there\\nnl \\u00e9\\\\\n", {"esc": "tab\there\nnl \u00e9\\"}),
    ("k\\=ey=v\\:al\n", {"k=ey": "v:al"}),
    ("dup=1\ndup=2\n", {"dup": "2"}),
    ("crlf=1\r\nx=2\r\n", {"crlf": "1", "x": "2"}),
    ("cont=a\\\n# not a comment\n", {"cont": "a# not a comment"}),
])
def test_parse_java_rules(text: str, expected: dict) -> None:
    assert parse_properties(text) == expected


def test_malformed_unicode_escape() -> None:
    with pytest.raises(PropertiesError, match="uxxxx"):
        parse_properties("k=\\u12G4\n")


def test_safe_write_keeps_bak(tmp_path: Path) -> None:
    f = tmp_path / "sub" / "currterm"
    write_file_safely(f, "one\n")
    assert f.read_text() == "one\n" and not (tmp_path / "sub" / "currterm.bak").exists()
    write_file_safely(f, "two\n")
    assert f.read_text() == "two\n" and (tmp_path / "sub" / "currterm.bak").read_text() == "one\n"
    assert not (tmp_path / "sub" / "currterm.tmp").exists()


def test_load_falls_back_to_bak(tmp_path: Path) -> None:
    f = tmp_path / "checkpoint"
    write_properties_file(f, [("committedIndex", 5), ("endIndex", 7)])
    write_properties_file(f, [("committedIndex", 6), ("endIndex", 8)])
    os.unlink(f)  # a Java writer died between its delete and its rename
    assert read_properties_file(f) == {"committedIndex": "5", "endIndex": "7"}
    os.unlink(tmp_path / "checkpoint.bak")
    assert read_properties_file(f) is None
    f.write_bytes(b"\xff\xfe=bad")
    with pytest.raises(PropertiesError, match="checkpoint"):
        read_properties_file(f)


def test_member_state_file(tmp_path: Path) -> None:
    ms = MemberStateFile(tmp_path / "dledger-n1")
    assert ms.load() == (0, None)
    ms.save(7, "n2")
    assert ms.load() == (7, "n2")
    ms.save(8, None)
    assert ms.load() == (8, None)
    assert ms.path.read_text() == "voteLeader=\ncurrTerm=8\n"
    ms.path.write_text("currTerm=abc\n")
    with pytest.raises(PropertiesError, match="currTerm='abc' is not a long"):
        ms.load()


def test_state_files_byte_identical_to_apache(fixture_root: Path, tmp_path: Path) -> None:
    theirs = fixture_root / "rmq-mixed" / "dledger-n0"
    MemberStateFile(tmp_path).save(0, "n0")
    CheckpointFile(tmp_path).save(1999, 1999)
    assert (tmp_path / "currterm").read_bytes() == (theirs / "currterm").read_bytes()
    assert (tmp_path / "checkpoint").read_bytes() == (theirs / "checkpoint").read_bytes()
    assert CheckpointFile(theirs).load_committed_index() == 1999


# Issue 12: a term no Java long holds is never written, and a stored one is reported (naming the
# file) instead of being handed to the core.
def test_member_state_refuses_to_persist_a_term_beyond_a_java_long(tmp_path):
    from dledger.store.state_files import MemberStateFile

    f = MemberStateFile(tmp_path)
    f.save(2**63 - 1, "n1")
    assert f.load() == (2**63 - 1, "n1")
    with pytest.raises(ValueError, match="refusing to persist term 18446744073709551615"):
        f.save(2**64 - 1, "n1")
    assert f.load() == (2**63 - 1, "n1")  # the file is untouched


def test_member_state_load_names_the_file_for_an_out_of_range_term(tmp_path):
    from dledger.store.properties import PropertiesError
    from dledger.store.state_files import MemberStateFile

    f = MemberStateFile(tmp_path)
    f.path.write_text("voteLeader=n1\ncurrTerm=18446744073709551615\n")
    with pytest.raises(PropertiesError, match=rf"{f.path}: currTerm=18446744073709551615 is outside"):
        f.load()
