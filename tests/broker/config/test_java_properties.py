"""One Java-properties parser for the project (issue 15.1): broker confs, the name server's conf,
DLedger's state files and the validator's reading of them agree on every Properties.load rule."""
from __future__ import annotations

from pathlib import Path

import pytest

from broker.config.java_properties import ConfigError, parse_properties, read_properties_file
from dledger.store.properties import PropertiesError, parse_properties as dledger_parse
from upgrade.validate.layout import read_properties as validator_read

TRICKY = (
    "# comment\n"
    "! another\n"
    "   listenPort = 10911\n"
    "brokerName:broker-a\n"
    "key\twith tab value\n"
    "multi = one, \\\n"
    "        two\n"
    "unicode=\\u00e9t\\u00e9 \\ud83d\\ude00\n"
    "sep\\=in\\:key = v\n"
    "empty\n"
    "vt=a\x0bb\n"          # a vertical tab does not end a line in Java (str.splitlines would split)
    "listenPort=10912\r\n"  # later wins; CRLF
)
EXPECTED = {"listenPort": "10912", "brokerName": "broker-a", "key": "with tab value", "multi": "one, two",
            "unicode": "\u00e9t\u00e9 \U0001F600", "sep=in:key": "v", "empty": "", "vt": "a\x0bb"}


def test_every_reader_parses_the_same(tmp_path: Path) -> None:
    f = tmp_path / "x.properties"
    f.write_text(TRICKY, encoding="utf-8")
    assert {k: v for k, v, _ in parse_properties(TRICKY)} == EXPECTED
    assert dledger_parse(TRICKY) == EXPECTED
    assert read_properties_file(f) == EXPECTED
    assert validator_read(f) == EXPECTED
    lines = {k: n for k, _, n in parse_properties(TRICKY)}
    assert lines["multi"] == 6 and lines["listenPort"] == 12


def test_malformed_escape_names_file_and_line(tmp_path: Path) -> None:
    text = "a=1\nb=\\u12\n"
    with pytest.raises(ConfigError, match=r"broker\.conf:2: malformed \\uxxxx"):
        parse_properties(text, "broker.conf")
    with pytest.raises(PropertiesError, match=r":2: malformed"):
        dledger_parse(text)
    f = tmp_path / "checkpoint"
    f.write_text(text)
    assert validator_read(f) is None  # unreadable state file: the caller falls back to .bak
