"""Jepsen-style fault harness: TCP fault proxy, history, checker, clusters, workload, nemeses.

Modules (each documents its rules): ``proxy`` (network faults), ``history``
(JSONL operations), ``checker`` (anomalies), ``cluster`` (real broker processes), ``workload``
(producers/consumers), ``nemesis`` (fault schedule), ``run`` (one seeded run, results table).
"""
