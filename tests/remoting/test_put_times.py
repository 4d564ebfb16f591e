"""PutTimes (mqadmin brokerStatus' putMessageEntireTimeMax / putMessageDistributeTime /
putLatency99): what the wrapped ``put_latency`` histogram's ``observe`` records, checked against
Apache's rule written out here (a put of ``ms`` whole milliseconds is in the first bucket whose
bound exceeds it), on both sides of every bucket bound and beyond the per-ms cap."""
from __future__ import annotations

from broker.api.metrics import BrokerMetrics
from broker.remoting.processors.admin_stats import DISTRIBUTE_BUCKETS, MS_CAP, PutTimes


def _expected_buckets(all_ms: list[float]) -> list[int]:
    out = [0] * len(DISTRIBUTE_BUCKETS)
    for ms in all_ms:
        whole = max(0, int(ms))
        out[next(i for i, (bound, _label) in enumerate(DISTRIBUTE_BUCKETS) if whole < bound)] += 1
    return out


def test_put_times_follow_apaches_buckets_and_the_histogram_still_counts() -> None:
    m = BrokerMetrics()
    pt = PutTimes(m.put_latency)
    all_ms = [-0.5, 0.0, 0.4, 0.999, 1.0, 9.99, 10.0, 49.0, 50.0, 99.5, 150.0, 499.0, 999.9, 1000.0, 2500.0,
              3999.0, 4000.0, 9999.9, float(MS_CAP), 12345.6, 60000.0]
    for ms in all_ms:
        m.put_latency.observe(ms / 1000.0, "remoting")
    pt.add(7.5)  # the direct form (no histogram)
    all_ms.append(7.5)
    assert pt.buckets == _expected_buckets(all_ms)
    assert pt.max_ms == 60000
    assert sum(pt.per_ms.values()) == len(all_ms) and pt.per_ms[MS_CAP] == 3
    assert pt.distribution() == "".join(f"{label}:{n} " for (_b, label), n in zip(DISTRIBUTE_BUCKETS,
                                                                                _expected_buckets(all_ms)))
    assert m.put_latency.count("remoting") == len(all_ms) - 1  # the histogram saw every observed put
    assert pt.percentile(0.5) == 100.0 and pt.percentile(1.0) == float(MS_CAP + 1)
