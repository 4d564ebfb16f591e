"""StoreSettings: what the message store reads from a MessageStoreConfig, with RocketMQ's defaults.

Rules:
- snake_case of RocketMQ's ``MessageStoreConfig`` names; defaults are Apache 4.9.8's unless a
  comment says why not.
- ``from_config`` takes a ``broker.config.broker_config.MessageStoreConfig``, any object or a dict
  with these names, plus overrides; enum values become their names; ``store_path_root_dir`` is
  required.

Its own module so that every part of the store (the facade, both commitlogs, recovery) can
name the settings type without importing the facade.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Final

ASYNC_FLUSH: Final = "ASYNC_FLUSH"
SYNC_FLUSH: Final = "SYNC_FLUSH"


@dataclass
class StoreSettings:
    """What the store reads from a MessageStoreConfig (snake_case RocketMQ names)."""

    store_path_root_dir: str
    store_path_commit_log: str | None = None
    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    mapped_file_size_consume_queue: int = 300_000 * 20
    flush_disk_type: str = ASYNC_FLUSH
    flush_interval_commit_log: int = 500
    flush_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval: int = 10_000
    flush_interval_consume_queue: int = 1000
    sync_flush_timeout: int = 5000
    max_message_size: int = 4 * 1024 * 1024
    check_crc_on_recover: bool = True
    check_crc_on_read: bool = True
    message_index_enable: bool = True
    message_index_safe: bool = False
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    warm_mapped_file_enable: bool = False  # RocketMQ default (warmMapedFileEnable)
    file_reserved_time: int = 72
    # retention (broker.store.clean): the thread runs only with retention=True (brokers turn it on)
    retention: bool = False
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75
    clean_file_forcibly_enable: bool = True
    clean_resource_interval: int = 10_000
    broker_role: str = "ASYNC_MASTER"
    # DLedger mode (dledger_commitlog.py): DLedgerConfig kwargs, MessageStoreConfig.dledger_settings()
    enable_dleger_commit_log: bool = False
    dledger_settings: dict[str, object] | None = None
    # brokers record and check the store's shape (broker.store.shape); tools that only read do not
    record_shape: bool = False
    # brokers seal per-page checksums of the classic commitlog (broker.store.page_crc)
    page_checksums: bool = False

    @classmethod
    def from_config(cls, config: object = None, **overrides: object) -> "StoreSettings":
        """From a ``broker.config.broker_config.MessageStoreConfig`` (or any object/dict with these names)."""
        values: dict[str, object] = {}
        for f in dataclasses.fields(cls):
            if isinstance(config, dict) and f.name in config:
                values[f.name] = config[f.name]
            elif config is not None and hasattr(config, f.name):
                values[f.name] = getattr(config, f.name)
        values.update(overrides)
        make_dledger = values.get("dledger_settings")
        if callable(make_dledger):  # MessageStoreConfig.dledger_settings()
            values["dledger_settings"] = make_dledger()
        for key in ("flush_disk_type", "broker_role"):
            if key in values:
                values[key] = getattr(values[key], "value", values[key])
        root = values.pop("store_path_root_dir", None)
        if not isinstance(root, (str, os.PathLike)):
            raise ValueError("store_path_root_dir is required (a path)")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:  # as the constructor's "unexpected keyword argument"
            raise TypeError(f"unknown store setting(s): {', '.join(unknown)}")
        out = cls(store_path_root_dir=os.fspath(root))
        for name, value in values.items():
            setattr(out, name, value)
        return out
