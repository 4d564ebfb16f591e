"""Tools for running the project's processes locally, never shipped: the upgrade demo
(``python -m tools.demo``, ``scripts/demo.sh``) and the one process harness shared by the demo,
the benchmarks (``bench/``) and the tests (issue 26.7): :mod:`tools.nodes` (``Child``,
``NamesrvProc``, ``BrokerProc`` in any mode, ``stop_all``, ``kill_all``), :mod:`tools.broker_confs`
(classic and DLedger confs on free ports), :mod:`tools.controller_cluster` (controllers, a name
server and Controller-mode brokers as one group), :mod:`tools.procs` (ports, conf files, waits).
The tests import these directly; the fault harness (``tests/faults/harness``) builds on them.

Rules: nothing under ``broker``, ``dledger``, ``namesrv`` or ``upgrade`` imports this package
(a running broker or ``mqupgrade`` never needs it), and ``pyproject.toml`` does not package it:
it runs from a checkout, with the repository root on ``sys.path`` (``python -m`` from the root,
pytest's rootdir, ``bench``'s own path setup).
"""
