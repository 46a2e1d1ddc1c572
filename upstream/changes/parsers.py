"""Child interpreters that compute symbol changes of Python files in parallel.

Plain subprocesses (``python -P -m upstream.changes.parser_child``) fed batches over their pipes,
not a ``multiprocessing`` pool: code that runs inside a Celery prefork child (a daemonic
process) may not start a multiprocessing pool, and the CLI takes this same path. A child reads
length-prefixed pickled batches of ``(path, old bytes, new bytes)`` on stdin and answers each
with the pickled list of :func:`upstream.changes.python.file_symbol_changes` results; it exits
at end of input, so children of a parent killed half way end with it.
"""

from __future__ import annotations

import os
import pickle
import queue
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any

import upstream.changes.python as py

Task = tuple[str, bytes | None, bytes | None]
Outcome = tuple[list[tuple[str, str, str]], str | None]

_ROOT = Path(__file__).resolve().parents[2]  # the directory holding the ``upstream`` package
_HEADER = 8


class ParserError(RuntimeError):
    """A parser child died or answered nonsense."""


def write(stream: IO[bytes], payload: Any) -> None:
    data = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(len(data).to_bytes(_HEADER, "big"))
    stream.write(data)
    stream.flush()


def read(stream: IO[bytes]) -> Any | None:
    header = stream.read(_HEADER)
    if len(header) < _HEADER:
        return None
    size = int.from_bytes(header, "big")
    data = stream.read(size)
    if len(data) < size:
        return None
    return pickle.loads(data)  # our own child, over its own pipe


class _Child:
    def __init__(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_ROOT), env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-P", "-m", "upstream.changes.parser_child"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd=_ROOT,
        )

    def call(self, tasks: Sequence[Task]) -> list[Outcome]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            write(self.proc.stdin, list(tasks))
        except (BrokenPipeError, OSError) as exc:
            raise ParserError(f"symbol parser child gone ({exc})") from exc
        answer = read(self.proc.stdout)
        if not isinstance(answer, list) or len(answer) != len(tasks):
            code = self.proc.poll()
            raise ParserError(f"symbol parser child failed (exit {code}); its stderr has why")
        return answer

    def close(self, *, kill: bool) -> None:
        if kill and self.proc.poll() is None:
            self.proc.kill()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Parsers:
    """``workers`` parser children; :meth:`submit` hands a chunk to the next idle one and
    returns at once (a thread waits on the child's pipe, which releases the GIL)."""

    def __init__(self, workers: int) -> None:
        self._children = [_Child() for _ in range(workers)]
        self._idle: queue.Queue[_Child] = queue.Queue()
        for child in self._children:
            self._idle.put(child)
        self._threads = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="parsers")

    def submit(self, tasks: Sequence[Task]) -> Future[list[Outcome]]:
        return self._threads.submit(self._run, list(tasks))

    def _run(self, tasks: list[Task]) -> list[Outcome]:
        child = self._idle.get()
        try:
            return child.call(tasks)
        finally:
            self._idle.put(child)

    def close(self, *, kill: bool = False) -> None:
        self._threads.shutdown(wait=not kill, cancel_futures=kill)
        for child in self._children:
            child.close(kill=kill)


def serve(inp: IO[bytes], out: IO[bytes]) -> None:
    """A child's loop: answer each batch read from ``inp`` on ``out`` until end of input."""
    while (tasks := read(inp)) is not None:
        write(out, [py.file_symbol_changes(*task) for task in tasks])
