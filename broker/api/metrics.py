"""Prometheus metrics of one broker, rendered by hand in the text exposition format 0.0.4.

Rules:
- Names are ``rocketmq_broker_*``; counters end in ``_total``, latencies are histograms in
  seconds. Every series carries no per-message label (topic at most), so cardinality stays
  bounded by the number of topics.
- Counters and histograms are updated on the event loop thread only (no locks needed).
- A put is counted once, whatever the door, by :meth:`BrokerMetrics.observe_put`: its latency
  (histogram by door, and Apache's put-time table, ``broker.stats_manager.PutTimes``), messages
  by topic and status, and on ``PUT_OK`` body bytes and ``TOPIC_PUT_NUMS`` (``mqadmin statsAll``,
  ``broker.stats_manager.KeyedCounts``, which pulls count into as well).
- Compiled with mypyc (``broker.native``, issue 22): per put this is one compiled call.
- Gauges are not stored: :meth:`BrokerMetrics.render` asks registered gauge callbacks (the
  controller: offsets, dispatch behind, slave lag, HA connections, role) at scrape time, so a
  scrape always sees the current state and the hot path pays nothing for them.

Theory of operation: :class:`Counter` and :class:`Histogram` keep label-tuple -> value maps;
:class:`BrokerMetrics` is the registry the API and controller share. No dependency on
``prometheus_client`` (not installed, and what we need is ~100 lines).
"""
from __future__ import annotations

import bisect
import math
from typing import Callable, Final, Iterable

from broker.stats_manager import TOPIC_PUT_NUMS, KeyedCounts, PutTimes

LabelValues = tuple[str, ...]
GaugeSample = tuple[dict[str, str], float]
GaugeCallback = Callable[[], Iterable[GaugeSample]]

LATENCY_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(names: tuple[str, ...], values: Iterable[str], extra: str = "") -> str:
    parts = [f'{n}="{_escape(str(v))}"' for n, v in zip(names, values)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _fmt(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))


class Counter:
    def __init__(self, name: str, help_text: str, label_names: tuple[str, ...] = ()) -> None:
        self.name, self.help, self.label_names = name, help_text, label_names
        self.values: dict[LabelValues, float] = {}

    def inc(self, *labels: str, amount: float = 1.0) -> None:
        self.values[labels] = self.values.get(labels, 0.0) + amount

    def get(self, *labels: str) -> float:
        return self.values.get(labels, 0.0)

    def render(self) -> list[str]:
        out = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} counter"]
        for labels, value in sorted(self.values.items()):
            out.append(f"{self.name}{_labels(self.label_names, labels)} {_fmt(value)}")
        return out


class Histogram:
    def __init__(self, name: str, help_text: str, label_names: tuple[str, ...] = (),
                 buckets: tuple[float, ...] = LATENCY_BUCKETS) -> None:
        self.name, self.help, self.label_names, self.buckets = name, help_text, label_names, buckets
        self.series: dict[LabelValues, list[float]] = {}  # bucket counts..., +Inf count, sum

    def observe(self, value: float, *labels: str) -> None:
        row = self.series.get(labels)
        if row is None:
            row = self.series[labels] = [0.0] * (len(self.buckets) + 2)
        row[bisect.bisect_left(self.buckets, value)] += 1
        row[-1] += value

    def count(self, *labels: str) -> int:
        row = self.series.get(labels)
        return int(sum(row[:-1])) if row else 0

    def render(self) -> list[str]:
        out = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        for labels, row in sorted(self.series.items()):
            cumulative = 0.0
            for bound, n in zip(self.buckets, row):
                cumulative += n
                le = 'le="' + _fmt(bound) + '"'
                out.append(f"{self.name}_bucket{_labels(self.label_names, labels, le)} {_fmt(cumulative)}")
            cumulative += row[len(self.buckets)]
            inf = 'le="+Inf"'
            out.append(f"{self.name}_bucket{_labels(self.label_names, labels, inf)} {_fmt(cumulative)}")
            out.append(f"{self.name}_sum{_labels(self.label_names, labels)} {_fmt(row[-1])}")
            out.append(f"{self.name}_count{_labels(self.label_names, labels)} {_fmt(cumulative)}")
        return out


class BrokerMetrics:
    """The registry: request/put/pull counters, put latency, and gauge callbacks."""

    def __init__(self) -> None:
        self.http_requests = Counter("rocketmq_broker_http_requests_total", "HTTP requests by route and status", ("route", "status"))
        self.put_messages = Counter("rocketmq_broker_put_messages_total", "Messages put, by topic and put status", ("topic", "status"))
        self.put_bytes = Counter("rocketmq_broker_put_message_bytes_total", "Body bytes of messages put OK", ("topic",))
        self.put_latency = Histogram("rocketmq_broker_put_latency_seconds", "Put latency (store + replication wait), per request", ("kind",))
        self.get_messages = Counter("rocketmq_broker_get_messages_total", "Messages returned by pulls", ("topic",))
        self.slave_sync = Counter("rocketmq_broker_slave_sync_total", "SlaveSynchronize file updates by file and result", ("file", "result"))
        self._gauges: list[tuple[str, str, GaugeCallback, str]] = []
        self.put_times = PutTimes()  # StoreStatsService's put-time table (mqadmin brokerStatus)
        self.stats_counts = KeyedCounts()  # BrokerStatsManager's per-key totals (mqadmin statsAll)

    def observe_put(self, door: str, topic: str, count: int, body_bytes: int, seconds: float, status: str) -> None:
        """Count one put (module rules); ``door`` labels the latency ("single", "batch", "remoting")."""
        self.put_latency.observe(seconds, door)
        self.put_times.add_seconds(seconds)
        self.put_messages.inc(topic, status, amount=count)
        if status == "PUT_OK":
            self.put_bytes.inc(topic, amount=body_bytes)
            self.stats_counts.add(TOPIC_PUT_NUMS, topic, count)

    def register_gauge(self, name: str, help_text: str, callback: GaugeCallback, kind: str = "gauge") -> None:
        """A series read at scrape time; ``kind="counter"`` for a monotonic count kept elsewhere."""
        self._gauges.append((name, help_text, callback, kind))

    def render(self) -> str:
        lines: list[str] = []
        for metric in (self.http_requests, self.put_messages, self.put_bytes, self.put_latency, self.get_messages, self.slave_sync):
            lines.extend(metric.render())
        for name, help_text, callback, kind in self._gauges:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")
            try:
                samples = list(callback())
            except Exception:  # noqa: BLE001 - a broken gauge must not break the scrape
                samples = []
            for labels, value in samples:
                names = tuple(labels)
                lines.append(f"{name}{_labels(names, (labels[n] for n in names))} {_fmt(float(value))}")
        return "\n".join(lines) + "\n"
