"""RateLimitedLog: the one flood-proof log (DLedger and every broker door use it)."""
from __future__ import annotations

import logging

from dledger.ratelog import RateLimitedLog


def test_burst_then_count_then_summary_in_next_window(caplog) -> None:  # type: ignore[no-untyped-def]
    now = [0.0]
    rl = RateLimitedLog(logging.getLogger("t.ratelog"), burst=2, window_s=1.0, clock=lambda: now[0], prefix="p%: ")
    with caplog.at_level("WARNING", logger="t.ratelog"):
        logged = [rl.warning("k", "line %d", i) for i in range(5)]
        assert logged == [True, True, False, False, False]
        now[0] = 1.5
        rl.warning("k", "later")
    msgs = [r.getMessage() for r in caplog.records]
    assert msgs == ["p%: line 0", "p%: line 1", "p%: later (and 3 more like it in the last 1 s)"]


def test_flush_reports_a_window_no_later_line_reports(caplog) -> None:  # type: ignore[no-untyped-def]
    now = [0.0]
    rl = RateLimitedLog(logging.getLogger("t.ratelog"), burst=1, window_s=10.0, clock=lambda: now[0], prefix="port: ")
    with caplog.at_level("WARNING", logger="t.ratelog"):
        for _ in range(4):
            rl.warning("cap", "refused")
        rl.warning("idle", "closed")  # another key keeps its own window
        rl.flush(5.0)  # windows still open: nothing
        assert len(caplog.records) == 2
        rl.flush(11.0)
        rl.flush(30.0)  # said once
    msgs = [r.getMessage() for r in caplog.records]
    assert msgs == ["port: refused", "port: closed", "port: ... and 3 more like it (cap) in the last 11 s"]
