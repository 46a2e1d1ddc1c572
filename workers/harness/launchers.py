"""How a pytest child process is started: a fresh interpreter, or a fork of a warm server,
either of the interpreter of the job's upstream environment (by default this one).

Both give a :class:`Child` with the same three operations so the shard runner does not care.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

from backends.base import fresh_pytest
from workers.harness.procs import die_with_parent

#: the file the warm pool's servers start from (not ``-m``: its docstring says why)
SERVER_MAIN = Path(__file__).resolve().parent / "server_main.py"


class Child(Protocol):
    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None:
        """None while running; else the exit code (negative: killed by that signal)."""

    def kill(self) -> None: ...


class Launcher(Protocol):
    def start(self, args: list[str], *, log: Path) -> Child: ...

    def close(self) -> None: ...


@dataclass
class _PopenChild:
    proc: subprocess.Popen[bytes]
    log: IO[bytes]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> int | None:
        code = self.proc.poll()
        if code is not None and not self.log.closed:
            self.log.close()
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.log.close()


@dataclass
class FreshProcessLauncher:
    """pytest (``backends.base.fresh_pytest``) in a new interpreter each time (pays the import cost each time)."""

    cwd: Path
    env: dict[str, str]
    python: str = sys.executable  # the upstream environment's interpreter

    def start(self, args: list[str], *, log: Path) -> Child:
        out = open(log, "ab")  # noqa: SIM115 - closed by the child wrapper
        proc = subprocess.Popen(
            fresh_pytest(args, python=self.python),
            cwd=self.cwd,
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )
        return _PopenChild(proc, out)

    def close(self) -> None:
        return None


@dataclass
class _ForkedChild:
    pid: int
    pool: WarmPool

    def poll(self) -> int | None:
        return self.pool._exit_code(self.pid)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        self.pool._wait_exit(self.pid)


@dataclass
class WarmPool:
    """A fork server (``workers.harness.warm_server``) that imported torch, the backend and the
    upstream test databases once; each ``start`` forks it, so a child starts in milliseconds.
    A crashing child never takes the server down."""

    cwd: Path
    env: dict[str, str]
    preload: list[str]
    python: str = sys.executable  # the upstream environment's interpreter
    _server: subprocess.Popen[bytes] | None = None
    _exits: dict[int, int] = field(default_factory=dict)
    _pids: list[int] = field(default_factory=list)
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _reader: threading.Thread | None = None
    _starting: threading.Lock = field(default_factory=threading.Lock)
    _ready_for: subprocess.Popen[bytes] | None = None  # the server whose ready line was read
    ready_seconds: float | None = None

    def _command(self) -> list[str]:
        return [self.python, "-P", str(SERVER_MAIN), "warm", *self.preload]

    def _request(self, args: list[str], log: Path) -> dict[str, object]:
        return {"args": args, "log": str(log)}

    def spawn(self) -> None:
        """Start the server process now, not waiting for it to import its modules (``warm``,
        or the first ``start``, waits). The server gets SIGKILL when the *thread* that started
        it ends (``PR_SET_PDEATHSIG`` is per thread): call this from a thread that lives as
        long as the pool, e.g. a worker process's main thread."""
        with self._starting:
            self._spawn()

    def warm(self) -> None:
        """Wait until the server imported its modules (starting it when it is not running)."""
        self._ensure()

    def _ensure(self) -> subprocess.Popen[bytes]:
        with self._starting:  # one start at a time: a warm-up thread and a shard may both ask
            server = self._spawn()
            if self._ready_for is not server:
                self._await_ready(server)
            return server

    def _spawn(self) -> subprocess.Popen[bytes]:
        if self._server is not None and self._server.poll() is None:
            return self._server
        self._server = subprocess.Popen(
            self._command(),
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,
            preexec_fn=die_with_parent,
        )
        return self._server

    def _await_ready(self, server: subprocess.Popen[bytes]) -> None:
        assert server.stdout is not None
        first = json.loads(server.stdout.readline() or b'{"error": "warm server died at start"}')
        if "ready" not in first:
            raise RuntimeError(f"warm server failed to start: {first.get('error')}")
        self.ready_seconds = float(first["ready"])
        self._reader = threading.Thread(target=self._read, args=(server,), daemon=True)
        self._reader.start()
        self._ready_for = server

    def _read(self, server: subprocess.Popen[bytes]) -> None:
        assert server.stdout is not None
        for line in server.stdout:
            msg = json.loads(line)
            with self._cond:
                if "pid" in msg and "exit" not in msg:
                    self._pids.append(int(msg["pid"]))
                elif "exit" in msg:
                    self._exits[int(msg["pid"])] = int(msg["exit"])
                self._cond.notify_all()
        with self._cond:  # the server is gone: its children are reaped by no one we can ask
            self._cond.notify_all()

    def start(self, args: list[str], *, log: Path) -> Child:
        server = self._ensure()
        assert server.stdin is not None
        with self._cond:
            before = len(self._pids)
            server.stdin.write(json.dumps(self._request(args, log)).encode() + b"\n")
            server.stdin.flush()
            if not self._cond.wait_for(lambda: len(self._pids) > before, timeout=60):
                raise RuntimeError("warm server did not fork a child within 60 s")
            pid = self._pids[before]
        return _ForkedChild(pid, self)

    def _exit_code(self, pid: int) -> int | None:
        with self._cond:
            return self._exits.get(pid)

    def _wait_exit(self, pid: int, timeout: float = 30) -> None:
        with self._cond:
            self._cond.wait_for(lambda: pid in self._exits, timeout=timeout)

    def close(self) -> None:
        if self._server is not None and self._server.poll() is None:
            assert self._server.stdin is not None
            self._server.stdin.close()
            try:
                self._server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._server.kill()
                self._server.wait()
        if self._server is not None and self._server.stdout is not None:
            self._server.stdout.close()
        self._server = None
