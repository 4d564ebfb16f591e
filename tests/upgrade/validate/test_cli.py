"""``mqupgrade validate``: exit codes, summary, JSON and PNG outputs."""
from __future__ import annotations

import json

import pytest

from upgrade import cli as mqupgrade
from upgrade.validate import cli


def test_missing_dir_is_one_line_exit_1(tmp_path, capsys):
    assert mqupgrade.main(["validate", str(tmp_path / "nope")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no such directory" in err[0]


def test_not_a_store_is_exit_1(tmp_path, capsys):
    (tmp_path / "something").mkdir()
    assert cli.main([str(tmp_path / "something")]) == 1
    assert "not a RocketMQ store" in capsys.readouterr().err


def test_bad_range_size_is_exit_1(tmp_path, capsys):
    assert cli.main([str(tmp_path), "--range-size", "12x"]) == 1


@pytest.mark.spark
def test_clean_store_exit_0_with_json_and_png(spark, fixture_root, tmp_path, capsys):
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    rc = cli.main([str(fixture_root / "rmq-mixed"), "--json", str(out), "--png", str(png), "--range-size", "256k",
                   "--quiet"], spark=spark)
    assert rc == 0
    text = capsys.readouterr().out
    assert "OK - all checks hold" in text and "divided_commitlog_offset 4,194,304" in text and "875 each" in text
    report = json.loads(out.read_text())
    assert report["ok"] and report["nodes"]["n0"]["messages"] == 7000
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


@pytest.mark.spark
def test_faulty_store_exit_2(spark, store_copy, tmp_path, capsys):
    root = store_copy("rmq-classic")
    with open(root / "commitlog" / f"{1 << 20:020d}", "r+b") as fh:
        fh.seek(1000)
        b = fh.read(1)
        fh.seek(1000)
        fh.write(bytes([b[0] ^ 1]))
    png = tmp_path / "bad.png"
    assert cli.main([str(root), "--png", str(png), "--quiet"], spark=spark) == 2
    assert "VIOLATIONS FOUND" in capsys.readouterr().out
    assert png.exists()


def test_without_the_validate_extra_it_names_the_install(tmp_path):
    """A broker-only install (no pyspark): one line naming the extra to install, exit 1."""
    import os
    import subprocess
    import sys

    from upgrade.validate.cli import MISSING_EXTRA

    hide = tmp_path / "hide" / "pyspark"
    hide.mkdir(parents=True)
    (hide / "__init__.py").write_text("raise ImportError('No module named pyspark (hidden by the test)')\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "hide"))
    r = subprocess.run([sys.executable, "-m", "upgrade.cli", "validate", str(tmp_path)], capture_output=True,
                       text=True, env=env, timeout=60, cwd=str(cli.__file__).rsplit("/upgrade/", 1)[0])
    assert r.returncode == 1, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(MISSING_EXTRA) and "[validate]" in lines[0], r.stderr
