"""Session-wide fixtures: the Apache fixture stores and one shared Spark session."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from tests.support import rmqfixtures as rf


@pytest.fixture(scope="session")
def fixture_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both fixture tarballs extracted once; treat as read-only (use ``store_copy``)."""
    return rf.extract_all(tmp_path_factory.mktemp("rmq-fixtures"))


@pytest.fixture(params=["plain", "variety"])
def fixture_set(request: pytest.FixtureRequest) -> rf.FixtureSet:
    """Parametrises a test over both fixture sets (plain and edge-case variety)."""
    return rf.SETS[request.param]


@pytest.fixture
def store_copy(fixture_root: Path, tmp_path: Path):
    """``store_copy("rmq-classic")`` -> a private writable sparse copy of that store."""

    def make(name: str) -> Path:
        return rf.copy_store(fixture_root / name, tmp_path / name)

    return make


@pytest.fixture(scope="session")
def manifests(fixture_root: Path):
    cache: dict[str, list] = {}

    def get(store: str) -> list:
        if store not in cache:
            cache[store] = rf.load_manifest(fixture_root, store)
        return cache[store]

    return get


@pytest.fixture(scope="session")
def spark() -> Iterator["object"]:
    """One local Spark session for every Spark test (a cold start costs ~8 s)."""
    from upgrade.validate.session import make_spark_session  # noqa: WPS433 (lazy: pyspark is heavy)

    session = make_spark_session("local[2]", app_name="tests")
    try:
        yield session
    finally:
        session.stop()
