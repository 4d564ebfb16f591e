"""Tools for running the project's processes locally: shared by the upgrade demo, the benchmarks
and the tests (none of it is used by a running broker)."""
