"""Tools for running the project's processes locally, never shipped: the upgrade demo
(``python -m tools.demo``, ``scripts/demo.sh``) and the process harness (:mod:`tools.procs`)
shared by the demo, the benchmarks (``bench/``) and the tests.

Rules: nothing under ``broker``, ``dledger``, ``namesrv`` or ``upgrade`` imports this package
(a running broker or ``mqupgrade`` never needs it), and ``pyproject.toml`` does not package it:
it runs from a checkout, with the repository root on ``sys.path`` (``python -m`` from the root,
pytest's rootdir, ``bench``'s own path setup).
"""
