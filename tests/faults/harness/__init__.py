"""Jepsen-style fault harness: TCP fault proxy, history, checker, clusters, workload, nemeses.

See ``tests/faults/README`` in the module docstrings: ``proxy`` (network faults), ``history``
(JSONL operations), ``checker`` (anomalies), ``cluster`` (real broker processes), ``workload``
(producers/consumers), ``nemesis`` (fault schedule), ``run`` (one seeded run, results table).
"""
