"""A real Celery worker (prefork pool) that calls the product's process-spawning work in its
pool child, where the planner runs it: a daemonic process that may not start a
``multiprocessing`` pool.

``celery -A tests.support.prefork_calls worker --pool prefork`` with the embedded broker (a
SQLite file under ``PREFORK_CALLS_DIR``); its one task calls ``module:function`` with keyword
arguments and writes ``{"result": ..., "daemon": ...}`` (or ``{"error": traceback}``) to a file.
:class:`PreforkWorker` starts it and waits for the answers; the ``*_in_child`` functions are the
calls, each on the cache directory it is given (cold: the test makes it fresh).
"""

from __future__ import annotations

import importlib
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

from celery import Celery

from tests.support.services import REPO_ROOT

TASK = "prefork_calls.call"
DIR_ENV = "PREFORK_CALLS_DIR"


def make_app(directory: Path) -> Celery:
    app = Celery("prefork-calls")
    app.conf.update(
        broker_url=f"sqla+sqlite:///{directory}/broker.sqlite",
        broker_connection_retry_on_startup=True,
        task_acks_late=True,
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
    )
    return app


app = make_app(Path(os.environ.get(DIR_ENV) or "/nonexistent"))


@app.task(name=TASK)
def call(target: str, kwargs: dict[str, Any], out: str) -> None:
    module, _, function = target.partition(":")
    answer: dict[str, Any] = {
        "daemon": bool(multiprocessing.current_process()._config.get("daemon")),  # type: ignore[attr-defined]
        "pid": os.getpid(),
    }
    try:
        answer["result"] = getattr(importlib.import_module(module), function)(**kwargs)
    except BaseException:
        answer["error"] = traceback.format_exc()
    tmp = Path(out).with_suffix(".tmp")
    tmp.write_text(json.dumps(answer))
    tmp.replace(out)


class PreforkWorker:
    """One ``celery worker --pool prefork -c 1`` on a fresh directory (its RELAY_VAR_DIR too)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.app = make_app(directory)
        env = {**os.environ, DIR_ENV: str(directory), "RELAY_VAR_DIR": str(directory / "var")}
        self.log = (directory / "worker.log").open("wb")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "tests.support.prefork_calls",
                "worker",
                "--pool",
                "prefork",
                "--concurrency",
                "1",
                "--without-heartbeat",
                "--without-gossip",
                "--without-mingle",
                "--loglevel",
                "INFO",
            ],
            cwd=REPO_ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def call(self, function: str, timeout: float = 900, **kwargs: Any) -> dict[str, Any]:
        """``function(**kwargs)`` (one of this module's ``*_in_child``) in the worker's pool
        child: its answer (``result`` or ``error``, and whether that child was daemonic)."""
        target = f"{__name__}:{function}"
        out = self.directory / f"answer-{uuid.uuid4().hex}.json"
        self.app.send_task(TASK, args=[target, kwargs, str(out)])
        deadline = time.monotonic() + timeout
        while not out.is_file():
            if self.proc.poll() is not None:
                raise AssertionError(f"the worker exited ({self.proc.returncode}): {self.tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no answer from {target} in {timeout:.0f} s: {self.tail()}")
            time.sleep(0.2)
        answer: dict[str, Any] = json.loads(out.read_text())
        return answer

    def tail(self) -> str:
        self.log.flush()
        return (self.directory / "worker.log").read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


# -- the calls: product functions that start processes, on a cache directory given ----------


def change_facts_in_child(checkout: str, base: str, head: str, cache_dir: str) -> dict[str, Any]:
    """The change facts with two parser children (the path ``relay replay`` and the planner
    take), cached under ``cache_dir``."""
    from upstream.changes import compute_change_facts, facts_to_json
    from upstream.git import GitCheckout

    source = GitCheckout(checkout)
    facts = compute_change_facts(
        source, source.resolve(base), source.resolve(head), cache_dir=cache_dir, workers=2
    )
    data: dict[str, Any] = json.loads(facts_to_json(facts))
    return data


def fingerprints_in_child(cache_dir: str, only: list[str]) -> dict[str, Any]:
    """The behaviour fingerprints of ``only`` under this interpreter's torch."""
    from backends.base import torch_build
    from upstream.changes.behaviour import Side, fingerprints

    [result] = fingerprints(
        [Side(python=sys.executable, build=torch_build())], Path(cache_dir), only=only
    )
    return result


def inventory_in_child(checkout: str, files: list[str], cache_dir: str) -> list[str]:
    """The test ids collected (a pytest subprocess per file) from ``files`` of ``checkout``."""
    from inventory.build import build_inventory
    from inventory.sources import CheckoutTests

    inventory = build_inventory(
        CheckoutTests(Path(checkout), tuple(files)), backend="cpu", cache_dir=Path(cache_dir)
    )
    return sorted(v.test_id for v in inventory.variants)


def import_map_in_child(checkout: str, files: list[str], cache_dir: str) -> dict[str, Any]:
    """The import map of a sample of ``files`` (a pytest subprocess), learned once."""
    from inventory.build import build_inventory
    from inventory.importmap import learn_import_map
    from inventory.sources import CheckoutTests

    cache = Path(cache_dir)
    inventory = build_inventory(
        CheckoutTests(Path(checkout), tuple(files)), backend="cpu", cache_dir=cache / "inventory"
    )
    path = learn_import_map(
        inventory.variants,
        key="tiny",
        backend="cpu",
        cache_dir=cache / "selector",
        root=Path(checkout),
    )
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data
