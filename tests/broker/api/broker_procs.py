"""The tests' names for the process harness, which lives in ``tools/`` (issue 26.7: one package
starts name servers, brokers and controllers for the tests, ``bench/`` and the demo):
:class:`tools.nodes.BrokerProc` and :func:`tools.nodes.kill_all`, the confs of
:mod:`tools.broker_confs` (``write_conf`` here is :func:`tools.broker_confs.classic_conf`: a
``conf/classic`` template by name), and :func:`commitlog_bytes`, a store read the tests share.

Every test that uses :class:`BrokerProc` must stop/kill it in a ``finally`` (or use the
``procs`` list pattern: append, then ``kill_all(procs)`` in ``finally``).
"""
from __future__ import annotations

from pathlib import Path

from tools.broker_confs import CONF_DIR, dledger_group_confs, dledger_single_conf, master_conf, slave_conf
from tools.broker_confs import classic_conf as write_conf
from tools.nodes import BrokerProc, kill_all
from tools.procs import REPO, port_pair, wait_until

__all__ = ["CONF_DIR", "REPO", "BrokerProc", "commitlog_bytes", "dledger_group_confs", "dledger_single_conf",
           "kill_all", "master_conf", "port_pair", "slave_conf", "wait_until", "write_conf"]


def commitlog_bytes(root: Path, upto: int) -> bytes:
    """The first ``upto`` bytes of the commitlog under ``root`` (files concatenated in order)."""
    out = bytearray()
    for f in sorted((root / "commitlog").iterdir()):
        if len(out) >= upto:
            break
        out += f.read_bytes()
    return bytes(out[:upto])
