"""Apache 4.9.8's mqadmin, many commands in one warm JVM (CI time: a JVM start costs 1.5-3 s).

Rules:

- :func:`run` has ``bin/mqadmin``'s contract: the command's stdout then its stderr, as one string;
  the same JVM options (``JAVA_OPT`` heap, ``-Duser.home=HOME``, ``-Drocketmq.home.dir``) and
  ``ROCKETMQ_HOME`` (whose ``conf/tools.yml`` signs the requests) as the script would give it.
- One JVM per (``ROCKETMQ_HOME``, ``HOME``) pair, started on first use; commands to one JVM run one
  at a time, in call order (callers on several threads queue on its lock).
- A command that outlives its timeout kills its JVM and raises :class:`subprocess.TimeoutExpired`,
  as ``subprocess.run(timeout=...)`` did; the next call starts a new JVM.
- Tests stop what they start: a test module imports :func:`mqadmin_jvms` (an autouse fixture)
  and every JVM is stopped after each test; ``atexit`` is only the backstop.

Theory of operation: ``MqadminRunner.java`` (next to this file) is compiled once per pytest
process with the JDK's javac into a temporary directory. Its ``main`` reads one request line per
command (output path, TAB, the arguments), calls ``MQAdminStartup.main0(args, null)`` — what
``bin/mqadmin`` runs; it returns instead of exiting — with ``System.out``/``System.err`` captured,
writes the captured bytes to the output path and answers ``done``. It clears the name-server
system property ``main0`` sets for ``-n`` before each command, so each sees what a fresh JVM sees.
"""
from __future__ import annotations

import atexit
import os
import select
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Iterator, Optional

import pytest

REPO = Path(__file__).resolve().parents[2]
APACHE = Path(os.environ.get("APACHE_ROCKETMQ", REPO.parent / "shared" / "apache-rocketmq-4.9.8"))
HEAP = "-Xms64m -Xmx128m"  # what tests gave bin/mqadmin

_compile_lock = threading.Lock()
_classes: Optional[Path] = None


def runner_classes() -> Path:
    """The compiled ``MqadminRunner`` (once per process)."""
    global _classes
    with _compile_lock:
        if _classes is None:
            out = Path(tempfile.mkdtemp(prefix="mqadmin-runner-"))
            atexit.register(shutil.rmtree, out, True)
            cp = ":".join(str(j) for j in sorted((APACHE / "lib").glob("*.jar")))
            r = subprocess.run(["javac", "-d", str(out), "-cp", cp, str(Path(__file__).with_name("MqadminRunner.java"))],
                               capture_output=True, text=True, timeout=120)
            if r.returncode != 0:
                raise RuntimeError(f"javac MqadminRunner.java: {r.returncode}\n{r.stdout}{r.stderr}")
            _classes = out
        return _classes


class MqadminJvm:
    """One JVM running MqadminRunner; :meth:`run` is one mqadmin command line."""

    def __init__(self, home: Path, rocketmq_home: Path = APACHE, heap: str = HEAP) -> None:
        self.home, self.rocketmq_home = Path(home), Path(rocketmq_home)
        self.home.mkdir(parents=True, exist_ok=True)
        self.lock = threading.Lock()
        self.count = 0
        self.err_path = self.home / f"mqadmin-jvm-{os.getpid()}-{id(self)}.err"
        env = dict(os.environ, ROCKETMQ_HOME=str(self.rocketmq_home), EXTRA_CP=str(runner_classes()),
                   JAVA_OPT=f"{heap} -Duser.home={self.home}")
        self._err: IO[bytes] = open(self.err_path, "wb")
        self.proc = subprocess.Popen([str(APACHE / "bin" / "jrun"), f"-Drocketmq.home.dir={self.rocketmq_home}",
                                      "MqadminRunner"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._err, env=env)
        self._buf = b""

    def run(self, *args: str, timeout: float = 90.0) -> str:
        for a in args:
            if "\t" in a or "\n" in a:
                raise ValueError(f"mqadmin argument with a TAB or newline: {a!r}")
        with self.lock:
            self.count += 1
            out = self.home / f"mqadmin-out-{id(self)}-{self.count}.txt"
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.write(("\t".join([str(out), *args]) + "\n").encode())
                self.proc.stdin.flush()
            except BrokenPipeError:
                raise RuntimeError(f"the mqadmin JVM is gone: {self._err_tail()}") from None
            self._wait_done(args, timeout)
            text = out.read_bytes().decode("utf-8", "replace")
            out.unlink()
            return text

    def _wait_done(self, args: tuple[str, ...], timeout: float) -> None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"done\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                raise subprocess.TimeoutExpired(["mqadmin", *args], timeout)
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 4096)
                if not chunk:
                    raise RuntimeError(f"the mqadmin JVM exited ({self.proc.poll()}): {self._err_tail()}")
                self._buf += chunk
        self._buf = self._buf.split(b"done\n", 1)[1]

    def _err_tail(self) -> str:
        self._err.flush()
        return self.err_path.read_bytes()[-3000:].decode("utf-8", "replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.close()  # EOF: the runner's loop ends
                self.proc.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._err.close()


_pool_lock = threading.Lock()
_pool: dict[tuple[Path, Path], MqadminJvm] = {}


def start(home: Path, rocketmq_home: Path = APACHE) -> MqadminJvm:
    """The JVM for this pair, started now if it is not running (its boot overlaps what the test does next)."""
    key = (Path(rocketmq_home), Path(home))
    with _pool_lock:
        jvm = _pool.get(key)
        if jvm is None or not jvm.alive():
            jvm = _pool[key] = MqadminJvm(Path(home), Path(rocketmq_home))
        return jvm


def run(home: Path, *args: str, rocketmq_home: Path = APACHE, timeout: float = 90.0) -> str:
    """``bin/mqadmin ARGS`` with ``-Duser.home=HOME`` and ``ROCKETMQ_HOME``: stdout then stderr."""
    return start(home, rocketmq_home).run(*args, timeout=timeout)


def close_all() -> None:
    with _pool_lock:
        jvms = list(_pool.values())
        _pool.clear()
    for jvm in jvms:
        jvm.close()


atexit.register(close_all)


@pytest.fixture(autouse=True)
def mqadmin_jvms() -> Iterator[None]:
    """Autouse in a module that imports it: every mqadmin JVM is stopped when the test ends."""
    try:
        yield
    finally:
        close_all()
