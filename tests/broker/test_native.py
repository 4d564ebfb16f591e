"""broker.native: the compiled hot modules and their pure-Python fallback (issue 22.5).

Rules checked:
- an install builds them (mypyc) and they run compiled; ``RMQPY_PURE_PYTHON=1`` runs them from
  source (scripts/test.sh runs their tests that way too);
- a compiled module older than its source never runs: all of them are then imported from source,
  with a warning naming the rebuild;
- compiled and source modules give identical bytes and values on the same inputs.
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Iterator

from broker import native
from broker.remoting import codec
from broker.store import message

PURE = os.environ.get(native.PURE_ENV) == "1"


def test_the_listed_modules_run_as_the_environment_says() -> None:
    for name in native.NATIVE_MODULES:
        importlib.import_module(name)
    st = native.native_status()
    loaded = set(native.NATIVE_MODULES) | (set(native.NATIVE_C_EXTENSIONS) if not PURE else set())
    assert set(st["modules"]) == loaded
    if PURE:
        assert st["mode"] == "source" and set(st["modules"].values()) == {"source"}, st
    else:
        # an install compiles them (setup.py); a stale build says which module and how to rebuild
        assert st["mode"] == "compiled" and set(st["modules"].values()) == {"compiled"}, st


def test_a_child_process_with_the_switch_runs_source(tmp_path: Path) -> None:
    code = ("import broker.remoting.codec, broker.store.message, json; from broker.native import native_status; "
            "print(json.dumps(native_status()))")
    out = subprocess.run([sys.executable, "-c", code], cwd=native.ROOT, capture_output=True, text=True, timeout=60,
                         env={**os.environ, native.PURE_ENV: "1"}, check=True).stdout
    st = json.loads(out)
    assert st["mode"] == "source" and set(st["modules"].values()) == {"source"}, st


def _fake_tree(root: Path, so_age_s: float) -> None:
    """Sources and extensions of the listed modules under ``root``; the .so files ``so_age_s``
    seconds older than their sources (negative: newer)."""
    now = time.time()
    for name in native.NATIVE_MODULES + native.NATIVE_C_EXTENSIONS:
        src = root.joinpath(*name.split(".")).with_suffix(".c" if name in native.NATIVE_C_EXTENSIONS else ".py")
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_text("")
        so = src.with_suffix(importlib.machinery.EXTENSION_SUFFIXES[0])
        so.write_bytes(b"")
        os.utime(src, (now, now))
        os.utime(so, (now - so_age_s, now - so_age_s))


def test_a_stale_build_runs_everything_from_source_and_says_how_to_rebuild(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(native.PURE_ENV, raising=False)
    monkeypatch.setattr(native, "ROOT", tmp_path)
    _fake_tree(tmp_path, so_age_s=-10)
    assert native._decide() == ("compiled", "mypyc")
    stale = tmp_path / "broker" / "store" / "message.py"
    os.utime(stale, (time.time() + 20, time.time() + 20))  # edited after the build
    mode, why = native._decide()
    assert mode == "source" and "broker.store.message" in why and "pip install -e ." in why
    os.utime(stale, (time.time() - 20, time.time() - 20))
    assert native._decide() == ("compiled", "mypyc")
    c_source = tmp_path / "broker" / "store" / "_record_scan.c"  # a C extension edited after the build
    os.utime(c_source, (time.time() + 20, time.time() + 20))
    mode, why = native._decide()
    assert mode == "source" and "broker.store._record_scan" in why
    os.utime(c_source, (time.time() - 20, time.time() - 20))
    (tmp_path / "broker" / "remoting" / f"codec{importlib.machinery.EXTENSION_SUFFIXES[0]}").unlink()
    assert native._decide()[0] == "source"  # one missing: none compiled
    monkeypatch.setenv(native.PURE_ENV, "1")
    assert native._decide() == ("source", "RMQPY_PURE_PYTHON=1")


def _load_source(name: str) -> ModuleType:
    path = native.ROOT.joinpath(*name.split(".")).with_suffix(".py")
    spec = importlib.util.spec_from_file_location(f"_pure_{name.replace('.', '_')}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up while the class is built
    try:
        spec.loader.exec_module(mod)
    finally:
        del sys.modules[spec.name]
    return mod


def _messages(mod: ModuleType, rng: random.Random, n: int) -> list:
    out = []
    for i in range(n):
        props = {"UNIQ_KEY": f"{rng.getrandbits(64):032X}", "TAGS": rng.choice(["a", "tagA", "中文"]),
                 "KEYS": " ".join(f"k{rng.randrange(1000)}" for _ in range(rng.randrange(3)))}
        if rng.random() < 0.3:
            props["DELAY"] = str(rng.randrange(1, 19))
        out.append(mod.MessageExt(topic=rng.choice(["TopicA", "BenchmarkTest", "%RETRY%g1"]),
                                  body=rng.randbytes(rng.randrange(0, 3000)), queue_id=rng.randrange(8),
                                  flag=rng.randrange(4), properties=props, born_timestamp=1_700_000_000_000 + i,
                                  store_timestamp=1_700_000_000_100 + i,
                                  born_host=("127.0.0.1", 40000 + i), store_host=("10.0.0.2", 10911)))
    return out


def test_compiled_and_source_message_codecs_agree() -> None:
    pure = _load_source("broker.store.message")
    for ours, theirs in zip(_messages(message, random.Random(7), 300), _messages(pure, random.Random(7), 300)):
        a = bytes(message.encode_message(ours, 5, 4096))
        b = bytes(pure.encode_message(theirs, 5, 4096))
        assert a == b
        da, db = message.decode_message(a), pure.decode_message(b)
        assert (da.topic, da.body, da.properties, da.queue_offset, da.commitlog_offset) == \
               (db.topic, db.body, db.properties, db.queue_offset, db.commitlog_offset)
        assert message.check_message_and_return_size(a) == pure.check_message_and_return_size(b)


def test_compiled_and_source_remoting_codecs_agree() -> None:
    pure = _load_source("broker.remoting.codec")
    rng = random.Random(11)
    for i in range(300):
        fields = {f"k{j}": rng.choice(["", "v", "中文", str(rng.getrandbits(40))]) for j in range(rng.randrange(12))}
        body = rng.randbytes(rng.randrange(0, 2000))
        code = rng.choice([10, 11, 310, 320])
        frames = []
        for mod in (codec, pure):
            cmd = mod.RemotingCommand.request(code, fields, body)
            cmd.serialize_type = i % 2
            frames.append(mod.encode(cmd))
        assert frames[0] == frames[1]
        a, b = codec.decode_frame(frames[0][4:]), pure.decode_frame(frames[1][4:])
        assert (a.code, a.ext_fields, a.body, a.opaque, a.flag, a.serialize_type) == \
               (b.code, b.ext_fields, b.body, b.opaque, b.flag, b.serialize_type)


def test_no_compiled_function_reuses_an_except_name_for_another_type() -> None:
    """Compiled, ``except A as exc: ... except B as exc:`` gives ``exc`` the type A in the whole
    function, so a B becomes a TypeError (the remoting server lost every SYSTEM_ERROR answer that
    way). Each except clause of a compiled module names its exception once per type."""
    root = Path(native.__file__).resolve().parent.parent
    found = []
    for name in native.NATIVE_MODULES:
        tree = ast.parse((root / (name.replace(".", "/") + ".py")).read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            types: dict[str, set[str]] = {}
            for node in ast.walk(fn):
                if isinstance(node, ast.ExceptHandler) and node.name:
                    types.setdefault(node.name, set()).add(ast.unparse(node.type) if node.type else "")
            found += [f"{name}.{fn.name}: {n} as {sorted(t)}" for n, t in types.items() if len(t) > 1]
    assert found == []


#: modules whose constants compiled code reads (not compiled themselves: their literal Finals are inlined)
CONSTANT_MODULES = ("broker.store.message_const", "broker.remoting.codes", "broker.remoting.limits",
                    "broker.store.store_settings", "broker.remoting.processors.common", "broker.ha.handshake")


def test_constants_compiled_code_reads_are_final() -> None:
    """Compiled, a plain module global is a dict lookup on every use (``R.SUCCESS``, a struct
    ``_HEAD``, ``BORNHOST_V6_FLAG``: 410 such lookups in the hot modules' code before they were
    marked); a ``Final`` literal is inlined and any other ``Final`` is a C static. Every upper-case
    name assigned at the top of a compiled module, or of a module of constants it reads, and every
    such class attribute of ``codes``, is declared ``Final``."""
    root = Path(native.__file__).resolve().parent.parent
    found = []
    for name in native.NATIVE_MODULES + CONSTANT_MODULES:
        tree = ast.parse((root / (name.replace(".", "/") + ".py")).read_text())
        bodies = [tree.body] + [c.body for c in tree.body if isinstance(c, ast.ClassDef) and name.endswith(".codes")]
        for body in bodies:
            for stmt in body:
                if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call) and \
                        ast.unparse(stmt.value.func) == "TypeVar":
                    continue
                targets = stmt.targets if isinstance(stmt, ast.Assign) else []
                if isinstance(stmt, ast.AnnAssign) and "Final" not in ast.unparse(stmt.annotation):
                    targets = [stmt.target]
                for t in targets:
                    for n in ast.walk(t):
                        if isinstance(n, ast.Name) and n.id.lstrip("_")[:1].isupper() and n.id.upper() == n.id:
                            found.append(f"{name}: {n.id} (line {stmt.lineno})")
    assert found == []


def test_no_compiled_dataclass_declares_a_memoryview_field() -> None:
    """Compiled, a dataclass with a field annotated ``memoryview`` fails at import (mypyc's
    dataclass support looks the annotation up in a table that lacks it: ``KeyError:
    'memoryview'``), so the whole compiled build would be refused at run time. Such a class is
    written by hand (``commitlog.SelectMappedBufferResult``)."""
    found = []
    for name, cls in _compiled_classes():
        if not any("dataclass" in ast.unparse(d) for d in cls.decorator_list):
            continue
        for stmt in cls.body:
            if isinstance(stmt, ast.AnnAssign) and "memoryview" in ast.unparse(stmt.annotation):
                found.append(f"{name}.{cls.name}.{ast.unparse(stmt.target)}")
    assert found == []


def _compiled_classes() -> Iterator[tuple[str, ast.ClassDef]]:
    """(module, class node) of every class in a compiled module's source."""
    root = Path(native.__file__).resolve().parent.parent
    for name in native.NATIVE_MODULES:
        tree = ast.parse((root / (name.replace(".", "/") + ".py")).read_text())
        for cls in ast.walk(tree):
            if isinstance(cls, ast.ClassDef):
                yield name, cls


#: compiled dataclasses that keep the interpreted ``__init__`` ``dataclasses`` generates, and why
#: that is fine: none is built per message or per request
COLD_DATACLASSES = {
    "broker.store.index_file.QueryOffsetResult": "one per index query",
    "broker.put_dedup.Stored": "one per retry answered from the dedup window",
    **{f"broker.ha.protocol.{name}": "one per HA frame or event (a frame carries many messages)"
       for name in ("Event", "SlaveReport", "TransferStarted", "DataFrame", "HeartbeatFrame", "HAError",
                    "ProtocolError", "OffsetMismatch", "ConnectionExpired")},
}


def test_hot_compiled_dataclasses_write_their_init() -> None:
    """Compiled, a dataclass's generated ``__init__`` stays interpreted (``dataclasses`` execs it
    at import): 0.6 us per object, more than the rest of building one. Classes built per message
    or per request say ``init=False`` and write ``__init__`` out (mypyc compiles it)."""
    found = []
    for name, cls in _compiled_classes():
        for deco in cls.decorator_list:
            text = ast.unparse(deco)
            if "dataclass" in text and "init=False" not in text and f"{name}.{cls.name}" not in COLD_DATACLASSES:
                found.append(f"{name}.{cls.name}")
    assert found == []
    for qual in COLD_DATACLASSES:  # the list names classes that exist
        mod, cls_name = qual.rsplit(".", 1)
        assert hasattr(importlib.import_module(mod), cls_name), qual


def test_written_out_inits_keep_the_dataclass_shape() -> None:
    """Same fields, order, defaults and keywords as the dataclass would make; eq and replace work."""
    import dataclasses

    from broker.store.dispatch import DispatchRequest
    from broker.store.put_result import AppendMessageResult, PutMessageResult, PutMessageStatus
    from broker.store_access import PutOutcome

    r = DispatchRequest("t", 1, 2, 3, 4, 5, 6)
    assert [f.name for f in dataclasses.fields(r)] == [
        "topic", "queue_id", "commitlog_offset", "msg_size", "tags_code", "store_timestamp",
        "consume_queue_offset", "keys", "uniq_key", "sys_flag", "prepared_transaction_offset", "buffer_size",
        "success"]
    assert (r.keys, r.uniq_key, r.sys_flag, r.prepared_transaction_offset, r.buffer_size, r.success) == \
        ("", "", 0, 0, -1, True)
    assert dataclasses.replace(r, buffer_size=9) == DispatchRequest("t", 1, 2, 3, 4, 5, 6, buffer_size=9)
    assert r != dataclasses.replace(r, success=False)
    a = AppendMessageResult(1, 2, 3, 4)
    assert (a.msg_num, a.physical_offsets, a.queue_offsets, a.store_hosts, a.end_offset, a.sizes) == \
        (1, (), (), (), 0, ())
    p1, p2 = PutMessageResult(PutMessageStatus.PUT_OK), PutMessageResult(PutMessageStatus.PUT_OK)
    assert p1 == p2 and p1.append_result is None and p1.error == "" and p1.extra == {}
    assert p1.extra is not p2.extra  # a new dict each, as default_factory made
    o = PutOutcome(["id"], [1], [2], 3, 4)
    assert (o.status, o.queue_id, o.detail, o.sizes) == (PutMessageStatus.PUT_OK, None, "", ())
    assert o == PutOutcome(msg_ids=["id"], queue_offsets=[1], physical_offsets=[2], wrote_bytes=3, next_offset=4)
