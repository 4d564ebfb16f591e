"""PutTimes (mqadmin brokerStatus' putMessageEntireTimeMax / putMessageDistributeTime /
putLatency99): what ``BrokerMetrics.observe_put`` (every door's put accounting) records, checked against
Apache's rule written out here (a put of ``ms`` whole milliseconds is in the first bucket whose
bound exceeds it), on both sides of every bucket bound and beyond the per-ms cap."""
from __future__ import annotations

from broker.api.metrics import BrokerMetrics
from broker.remoting.processors.admin_stats import DISTRIBUTE_BUCKETS, MS_CAP


def _expected_buckets(all_ms: list[float]) -> list[int]:
    out = [0] * len(DISTRIBUTE_BUCKETS)
    for ms in all_ms:
        whole = max(0, int(ms))
        out[next(i for i, (bound, _label) in enumerate(DISTRIBUTE_BUCKETS) if whole < bound)] += 1
    return out


def test_put_times_follow_apaches_buckets_and_the_histogram_still_counts() -> None:
    m = BrokerMetrics()
    pt = m.put_times
    all_ms = [-0.5, 0.0, 0.4, 0.999, 1.0, 9.99, 10.0, 49.0, 50.0, 99.5, 150.0, 499.0, 999.9, 1000.0, 2500.0,
              3999.0, 4000.0, 9999.9, float(MS_CAP), 12345.6, 60000.0]
    for ms in all_ms:
        m.observe_put("remoting", "T", 1, 10, ms / 1000.0, "PUT_OK")
    pt.add(7.5)  # the direct form (no histogram)
    all_ms.append(7.5)
    assert pt.buckets == _expected_buckets(all_ms)
    assert pt.max_ms == 60000
    assert sum(pt.per_ms.values()) == len(all_ms) and pt.per_ms[MS_CAP] == 3
    assert pt.distribution() == "".join(f"{label}:{n} " for (_b, label), n in zip(DISTRIBUTE_BUCKETS,
                                                                                _expected_buckets(all_ms)))
    assert m.put_latency.count("remoting") == len(all_ms) - 1  # the histogram saw every observed put
    assert pt.percentile(0.5) == 100.0 and pt.percentile(1.0) == float(MS_CAP + 1)
    # the same call counted the messages, their bytes and mqadmin statsAll's TOPIC_PUT_NUMS
    n = len(all_ms) - 1
    assert m.put_messages.get("T", "PUT_OK") == n and m.put_bytes.get("T") == 10 * n
    assert m.stats_counts.totals[("TOPIC_PUT_NUMS", "T")] == n


def test_a_refused_put_counts_by_status_and_not_as_stored() -> None:
    m = BrokerMetrics()
    m.observe_put("single", "T", 3, 300, 0.002, "FLUSH_DISK_TIMEOUT")
    assert m.put_messages.get("T", "FLUSH_DISK_TIMEOUT") == 3 and m.put_messages.get("T", "PUT_OK") == 0
    assert m.put_bytes.get("T") == 0 and ("TOPIC_PUT_NUMS", "T") not in m.stats_counts.totals
    assert m.put_latency.count("single") == 1 and m.put_times.max_ms == 2
