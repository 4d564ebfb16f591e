"""Compiled hot modules (mypyc) and their pure-Python fallback (issue 22.5).

Rules:
- :data:`NATIVE_MODULES` are compiled with mypyc by ``pip install`` (``setup.py`` reads the list
  from this file), into ``.so`` files beside their sources. ``RMQPY_PURE_PYTHON=1`` at install time
  builds nothing; a failed compile fails the install (it names this switch).
- At run time they are imported compiled when every one of them has a ``.so`` newer than its
  ``.py``. ``RMQPY_PURE_PYTHON=1`` imports them all from source (the suite runs their tests that
  way too). A stale ``.so`` (a source edited after the build) never runs: all of them are then
  imported from source, with one warning naming the rebuild (``pip install -e .``). All or none,
  because compiled modules call each other's compiled code directly.
- :data:`NATIVE_C_EXTENSIONS` are hand-written C (a ``.c`` beside where the ``.py`` would be),
  built by the same install, judged by the same rule (a ``.so`` older than its ``.c`` is stale:
  everything runs from source) and never imported in source mode (:func:`c_extension`).
- :func:`native_status` says what runs (``/status`` ``native``, the broker's start line).
- Only stdlib imports here: ``setup.py`` loads this file before anything is installed.

Theory of operation: :func:`install` puts one finder at the front of ``sys.meta_path``; for a
module of the list it answers with the ``.py`` (source mode) or steps aside (the normal finders
then prefer the extension module, as Python does).
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Optional, Sequence

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent

#: the typed hot modules of the put and pull paths (chosen from py-spy profiles of the broker
#: under Apache's benchmark producer; each must type-check under mypy). Compiled code checks
#: declared types at run time: an annotation that lies (a list where a tuple is declared, a None
#: where a str is) is a TypeError there, so values from outside (libraries, peers) are read as
#: ``Any`` first.
NATIVE_MODULES: tuple[str, ...] = (
    "broker.remoting.codec",
    "broker.remoting.server",
    "broker.remoting.processors.send",
    "broker.store.message",
    "broker.store.message_id",  # the codec's host bytes and msgIds, split out of message (issue 26 H14)
    "broker.store.message_properties",  # the codec's properties text (issue 26 H14)
    "broker.store.consume_queue",
    "broker.store.index_file",
    "broker.store.reput",
    "broker.put_coalescer",
    "broker.put_dedup",
    "broker.gc_quiet",
    "broker.ha.protocol",
    "broker.store.java_hash",
    "broker.store.mapped_file",  # consume_queue and index_file call it per unit (issue 26.5)
    # the classic master's per-request put path above the coalescer (issue 22, H10): the send
    # service, the store adapter (dedup window, outcome) and the put results built per request
    "broker.send_service",
    "broker.store_access",
    "broker.store.put_result",
    # issue 22, session 15: the classic commitlog's append (per-message patch loop, flush and
    # replica requests) and the request header's field reads
    "broker.store.commitlog",
    "broker.remoting.header_fields",
    "broker.store.names",  # every dispatched record's topic/queue check (the reput thread holds the GIL)
    # the reput thread's per-record objects and walk (a DispatchRequest per record, built by the
    # compiled record codec; the walk's generator yields one step per record)
    "broker.store.dispatch",
    "broker.store.record_walk",
    "broker.api.metrics",  # every put's accounting, one call (was five interpreted ones: 4.5% of the master)
    "broker.stats_manager",
)

#: hand-written C extensions (``name``: the module, built from ``name``'s path + ``.c`` by the
#: same install), each the fast path of a pure-Python function that stays the definition: the
#: caller imports it only through :func:`c_extension`, which answers None in source mode, so the
#: pure-Python fallback is what runs (and is tested) with ``RMQPY_PURE_PYTHON=1``. Chosen where a
#: perf profile showed C-API glue, not Python, as the cost (issue 22).
NATIVE_C_EXTENSIONS: tuple[str, ...] = (
    "broker.store._record_scan",  # the reput thread's record parse (message.check_message_and_return_size)
    "broker.remoting._header_codec",  # the ROCKETMQ remoting header, both ways (remoting.codec)
    "broker.store._record_encode",  # the put path's record encoder (message.encode_batch)
    "broker.store._index_write",  # one record's IndexFile entries: hashes, slots, entries, header (index_file)
)

PURE_ENV = "RMQPY_PURE_PYTHON"


def _source(name: str) -> Path:
    suffix = ".c" if name in NATIVE_C_EXTENSIONS else ".py"
    return ROOT.joinpath(*name.split(".")).with_suffix(suffix)


def _extension(name: str) -> Optional[Path]:
    src = _source(name)
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        so = src.with_suffix(suffix)
        if so.is_file():
            return so
    return None


def _decide() -> tuple[str, str]:
    """(mode, why): mode is 'compiled' or 'source'."""
    if os.environ.get(PURE_ENV) == "1":
        return "source", f"{PURE_ENV}=1"
    missing, stale = [], []
    for name in NATIVE_MODULES + NATIVE_C_EXTENSIONS:
        so = _extension(name)
        if so is None:
            missing.append(name)
        elif so.stat().st_mtime < _source(name).stat().st_mtime:
            stale.append(name)
    if stale:
        return "source", (f"compiled {', '.join(stale)} older than the source: rebuild with "
                          f"`pip install -e .` (or scripts/setup.sh)")
    if missing:
        return "source", "not compiled (installed without mypyc, or RMQPY_PURE_PYTHON=1 at install)"
    return "compiled", "mypyc"


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, mode: str) -> None:
        self.mode = mode

    def find_spec(self, fullname: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None
                  ) -> Optional[importlib.machinery.ModuleSpec]:
        if self.mode != "source":
            return None
        if fullname in NATIVE_C_EXTENSIONS:  # source mode: the fallback runs, never a stale or half build
            raise ModuleNotFoundError(f"{fullname} is not used in source mode ({_state.get('why', '')})",
                                      name=fullname)
        if fullname not in NATIVE_MODULES:
            return None
        src = _source(fullname)
        return importlib.util.spec_from_file_location(fullname, src) if src.is_file() else None


_state: dict[str, Any] = {}


def install() -> None:
    """Decide once per process (before any listed module is imported) and install the finder."""
    if _state:
        return
    mode, why = _decide()
    _state.update(mode=mode, why=why)
    if mode == "source" and "older than the source" in why:
        log.warning("native modules: %s; running them from source meanwhile", why)
    sys.meta_path.insert(0, _Finder(mode))


def c_extension(name: str) -> Optional[ModuleType]:
    """The C extension ``name`` (one of :data:`NATIVE_C_EXTENSIONS`) when compiled modules run,
    else None: the caller then uses its pure-Python definition."""
    install()
    if _state.get("mode") != "compiled":
        return None
    return importlib.import_module(name)


def native_status() -> dict[str, Any]:
    """What runs: the decision, and for each listed module that is imported, where from."""
    loaded = {}
    for name in NATIVE_MODULES + NATIVE_C_EXTENSIONS:
        mod = sys.modules.get(name)
        if mod is not None:
            loaded[name] = "compiled" if str(getattr(mod, "__file__", "")).endswith(".so") else "source"
    return {"mode": _state.get("mode", "undecided"), "why": _state.get("why", ""), "modules": loaded}
