"""The warm pool's fork server: ``python -m workers.harness.warm_server MODULE...``.

Imports the given modules once (``spyre_stack:register`` style entries call a function), then
pytest and the plugins every child loads (its entry-point plugins and the harness's report
plugin), and the syntax trees failure reports need of the preloaded modules. Prints ``{"ready": seconds}``, then for every request line ``{"args": [...], "log": path}`` on stdin
forks a child that runs ``pytest.main(args)`` with stdout/stderr sent to ``log``, prints
``{"pid": n}``, and later ``{"pid": n, "exit": code}`` (negative code: killed by that signal).
Children run single-threaded (OMP_NUM_THREADS=1 is expected in the environment): forking a
process whose OpenMP pool is running is not safe.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import sys
import threading
import time
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

_out_lock = threading.Lock()
_running: set[int] = set()


def _say(**msg: object) -> None:
    with _out_lock:
        sys.stdout.write(json.dumps(msg) + "\n")
        sys.stdout.flush()


def _preload_entry(entry: str) -> EntryPoint:
    """A preload entry (``module`` or ``module:function``) in the syntax of an entry point's
    value, parsed and loaded by the standard library as entry points are."""
    return EntryPoint(name=entry, value=entry, group="preload")


def _preload(entries: list[str]) -> None:
    for entry in entries:
        ep = _preload_entry(entry)
        loaded = ep.load()
        if ep.attr:
            loaded()


#: pytest's note that a plugin imported before it configured cannot be assertion-rewritten:
#: true of every plugin the server preloads, and an error under ``filterwarnings = error``;
#: a child's own test modules and conftests are imported (and rewritten) in the child
_NOT_REWRITTEN_IS_FINE = ["-W", "ignore::pytest.PytestAssertRewriteWarning"]


def _preload_pytest() -> None:
    """pytest, its entry-point plugins and the report plugin: what every child imports before
    its first test (what that saves: docs/benchmarks.md). They are not
    assertion-rewritten then (their own asserts: the tests' are), which pytest would warn
    about: children are started with that warning ignored (``_NOT_REWRITTEN_IS_FINE``)."""
    import pytest  # noqa: F401

    for ep in entry_points(group="pytest11"):
        with contextlib.suppress(Exception):  # a broken plugin fails in the child, as it would
            importlib.import_module(ep.module)
    importlib.import_module("workers.harness.report_plugin")


def _seed_tracebacks(entries: list[str]) -> None:
    """The syntax trees of the preloaded modules (upstream's test databases: the frames of every
    expected failure's traceback), parsed once here for every child's reports
    (:func:`backends.tbcache.seed`)."""
    from backends import tbcache

    files = []
    for entry in entries:
        module = sys.modules.get(_preload_entry(entry).module)
        path = getattr(module, "__file__", None)
        if path and not path.endswith("__init__.py"):
            files.append(Path(path))
    tbcache.seed(files)


def _child(args: list[str], log: str) -> None:
    from workers.harness.procs import die_with_parent

    die_with_parent()
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    code = 3
    try:
        import pytest

        code = int(pytest.main([*_NOT_REWRITTEN_IS_FINE, *args]))
    except BaseException:  # pytest itself failed: say why in the child's log
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _wait(pid: int) -> None:
    _, status = os.waitpid(pid, 0)
    _running.discard(pid)
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    _say(pid=pid, exit=code)


def main(entries: list[str]) -> None:
    start = time.perf_counter()
    try:
        _preload(entries)
        _preload_pytest()
        _seed_tracebacks(entries)
    except Exception as exc:
        _say(error=f"{type(exc).__name__}: {exc}")
        sys.exit(1)
    _say(ready=time.perf_counter() - start)
    for line in sys.stdin:
        request = json.loads(line)
        with _out_lock:  # no thread may hold the lock across fork
            pid = os.fork()
        if pid == 0:
            _child(list(request["args"]), str(request["log"]))
        _running.add(pid)
        _say(pid=pid)
        threading.Thread(target=_wait, args=(pid,), daemon=True).start()
    # stdin closed: the client is gone or done; no child may outlive it
    for pid in list(_running):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


if __name__ == "__main__":
    main(sys.argv[1:])
