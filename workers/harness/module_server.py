"""A module server: one test module collected once, its tests run in forks of the collection.

``python -m workers.harness.module_server SPEC_JSON`` with ``{"preload": [...], "args": [pytest
args], "module": path}``: imports the preload entries, runs pytest's collection of the module
with the runner's arguments (and the harness's report plugin), prints ``{"ready": seconds,
"items": n}`` on its protocol channel (the stdout it was started with; pytest's own output goes
elsewhere), then for every request line ``{"ids": file, "events": path, "artifacts": path,
"device_time": name, "log": path}`` on stdin forks a child that runs those of the collected
tests whose node ids the file lists (in collection order) and streams their events like any
harness child; ``{"pid": n}``, later ``{"pid": n, "exit": code}``. A module that fails to
collect prints ``{"error": ...}`` and exits (the launcher runs it the ordinary way).

So a shard child pays neither the interpreter start, nor torch's import, nor the collection of
its module (tens of seconds for the device-generic conformance module): each is paid once per
warm pool and module. A crashing or hanging test kills only its child.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from typing import IO, Any

import pytest

from workers.harness.procs import die_with_parent
from workers.harness.warm_server import _preload


class _Serve:
    """The plugin that turns the collecting pytest session into a fork server."""

    def __init__(self, proto: IO[str], started: float, module: str) -> None:
        self.proto = proto
        self.started = started
        self.module = module
        self.lock = threading.Lock()
        self.running: set[int] = set()
        self.in_child = False

    def say(self, **msg: object) -> None:
        with self.lock:
            self.proto.write(json.dumps(msg) + "\n")
            self.proto.flush()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool | None:
        if session.testsfailed:
            self.say(error=f"{session.testsfailed} error(s) collecting {self.module}")
            return True
        self.say(ready=round(time.perf_counter() - self.started, 3), items=len(session.items))
        # pytest captures the session's stdin/stdout/stderr: the server reads its requests
        # from the real stdin; each child resumes capturing for its tests
        capman = session.config.pluginmanager.getplugin("capturemanager")
        if capman is not None:
            capman.suspend_global_capture(in_=True)
        for line in sys.stdin:
            request = json.loads(line)
            sys.stdout.flush()
            sys.stderr.flush()
            with self.lock:  # no thread may hold the lock across fork
                pid = os.fork()
            if pid == 0:
                self._become_child(session, request)
                return None  # pytest's own loop runs the chosen tests in this child
            self.running.add(pid)
            self.say(pid=pid)
            threading.Thread(target=self._wait, args=(pid,), daemon=True).start()
        for pid in list(self.running):  # stdin closed: no child may outlive the server
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return True

    def _wait(self, pid: int) -> None:
        _, status = os.waitpid(pid, 0)
        self.running.discard(pid)
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        self.say(pid=pid, exit=code)

    def _become_child(self, session: pytest.Session, request: dict[str, Any]) -> None:
        self.in_child = True
        die_with_parent()
        fd = os.open(str(request["log"]), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        # stdout/stderr to the child's log, and so the fds pytest's capture restores between
        # tests (it saved the server's at start)
        capman = session.config.pluginmanager.getplugin("capturemanager")
        capturing = getattr(capman, "_global_capturing", None)
        for cap in (getattr(capturing, "out", None), getattr(capturing, "err", None)):
            saved = getattr(cap, "targetfd_save", None)
            if isinstance(saved, int):
                os.dup2(fd, saved)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        with open(request["ids"]) as f:
            wanted = {line.strip() for line in f if line.strip()}
        session.items = [item for item in session.items if item.nodeid in wanted]
        for missing in sorted(wanted - {item.nodeid for item in session.items}):
            print(f"ERROR: not found: {missing}", file=sys.stderr)  # as pytest says it
        session.testscollected = len(session.items)
        if capman is not None:
            capman.resume_global_capture()
        writer = session.config.pluginmanager.get_plugin("relay-events-writer")
        assert writer is not None, "the report plugin is loaded with the server's arguments"
        writer.reopen(request["events"], request.get("artifacts"), request.get("device_time"))


def main(spec: dict[str, Any]) -> None:
    started = time.perf_counter()
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1)  # pytest's output in the server goes nowhere; the protocol has its fd
    try:
        _preload(list(spec.get("preload") or []))
    except Exception as exc:
        proto.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"}) + "\n")
        proto.flush()
        sys.exit(1)
    serve = _Serve(proto, started, spec["module"])
    args = [
        *spec["args"],
        "-p",
        "workers.harness.report_plugin",
        "--relay-events",
        os.devnull,
        spec["module"],
    ]
    try:
        code = int(pytest.main(args, plugins=[serve]))
    except BaseException as exc:  # a child must never return into the server's code
        if serve.in_child:
            os._exit(3)
        serve.say(error=f"{type(exc).__name__}: {exc}")
        raise
    sys.stdout.flush()
    sys.stderr.flush()
    if serve.in_child:
        os._exit(code)
    os._exit(0)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
