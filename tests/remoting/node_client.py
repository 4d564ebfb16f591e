"""Test helpers for the ali-ons end-to-end tests: install the npm package, run the JS driver.

Rules: ``npm`` missing -> the test is skipped with that reason; ``npm ci`` failing -> the test
fails (never a silent pass). The driver ``js/e2e.js`` prints one JSON object per line; a reader
thread collects them. Every :class:`NodeProc` is killed by the test's ``finally``.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

JS_DIR = Path(__file__).resolve().parent / "js"


def ensure_ali_ons() -> Path:
    if (JS_DIR / "node_modules" / "ali-ons" / "package.json").exists() and shutil.which("node"):
        return JS_DIR
    if shutil.which("npm") is None or shutil.which("node") is None:
        pytest.skip("npm/node not installed: cannot install the ali-ons client")
    r = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=JS_DIR, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        pytest.fail(f"npm ci in {JS_DIR} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return JS_DIR


class NodeProc:
    """A client process speaking JSON lines: ali-ons (``e2e.js``) by default, or ``cmd``."""

    def __init__(self, args: list[str], log_path: Path, cmd: Optional[list[str]] = None,
                 cwd: Optional[Path] = None) -> None:
        self.log_path = log_path
        self._err = open(log_path, "ab")
        self.proc = subprocess.Popen([*(cmd or ["node", str(JS_DIR / "e2e.js")]), *args], cwd=cwd or JS_DIR,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err)
        self.lines: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                obj = json.loads(raw)
            except ValueError:
                continue
            with self._lock:
                self.lines.append(obj)

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.lines)

    def wait_for(self, pred: Callable[[list[dict[str, Any]]], bool], timeout: float, what: str) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            snap = self.snapshot()
            if pred(snap):
                return snap
            if self.proc.poll() is not None:
                self._reader.join(2)
                snap = self.snapshot()
                if pred(snap):
                    return snap
                raise AssertionError(f"node exited ({self.proc.returncode}) before {what}:\n{self.log()}")
            time.sleep(0.1)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}:\n{self.log()}")

    def send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text.encode())
        self.proc.stdin.flush()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._err.close()

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except FileNotFoundError:
            return ""


def acked(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [x for x in lines if "ack" in x]


def delivered(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [x["msg"] for x in lines if "msg" in x]


def check_exactly_once(acks: list[dict[str, Any]], msgs: list[dict[str, Any]], topic: str) -> Optional[str]:
    """None if every acknowledged msgId was delivered exactly once with its key and tag."""
    seen: dict[str, list[dict[str, Any]]] = {}
    for m in msgs:
        if m["topic"] == topic:
            seen.setdefault(m["msgId"], []).append(m)
    problems = []
    for a in acks:
        got = seen.get(a["msgId"], [])
        if len(got) != 1:
            problems.append(f"{a['key']} ({a['msgId']}) delivered {len(got)} times")
        elif got[0]["key"] != a["key"] or got[0]["tag"] != a["tag"] or got[0]["body"] != f"body-{a['ack']}":
            problems.append(f"{a['key']} delivered with key/tag/body {got[0]}")
    return "; ".join(problems[:20]) or None
