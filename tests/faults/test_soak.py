"""Long fault soak (``-m soak``; ``scripts/soak.sh [minutes]``): seeded random schedules until a time limit.

Each round draws a seed, a mode (DLedger group or classic pair) and a random schedule of that
mode's nemeses (every nemesis once, shuffled, some twice) and checks it like the CI runs. The
budget is ``FAULT_SOAK_MINUTES`` (default 10); a round is never started when less than two
minutes are left. Every round's seed is in the results table JSON; any failing round fails
the test with its run directory.
"""
from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from tests.faults.conftest import assert_clean, seed_for
from tests.faults.harness.nemesis import DLEDGER_ONLY, NEMESES
from tests.faults.harness.run import run_faults


@pytest.mark.soak
@pytest.mark.multiprocess
@pytest.mark.timeout(0)
def test_fault_soak(tmp_path_factory: pytest.TempPathFactory, record_result) -> None:
    budget = float(os.environ.get("FAULT_SOAK_MINUTES", "10")) * 60
    deadline = time.monotonic() + budget
    master = random.Random(seed_for(int(time.time())))
    failures = []
    rounds = 0
    while time.monotonic() < deadline - 120:
        seed = master.randrange(1 << 31)
        rng = random.Random(seed)
        mode = rng.choice(["dledger", "dledger", "classic"])
        names = [n for n in NEMESES if mode == "dledger" or n not in DLEDGER_ONLY]
        schedule = names + rng.sample(names, k=len(names) // 3)
        rng.shuffle(schedule)
        run_dir: Path = tmp_path_factory.mktemp(f"soak-{mode}-{seed}")
        result = run_faults(mode, schedule, seed, run_dir, fault_s=rng.uniform(2.0, 5.0))
        record_result(result)
        rounds += 1
        if not result.get("ok"):
            failures.append(result)
    assert rounds > 0, "budget too small for one round"
    for r in failures:
        assert_clean(r)
