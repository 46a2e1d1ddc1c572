"""Engines and sessions. One engine per (process, URL), created on demand."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool

_lock = threading.Lock()
_engines: dict[str, Engine] = {}
_factories: dict[str, sessionmaker[Session]] = {}


def make_engine(url: str, *, null_pool: bool = False) -> Engine:
    kwargs: dict[str, Any] = {"pool_pre_ping": True}
    if null_pool:
        kwargs["poolclass"] = NullPool
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        kwargs["connect_args"] = {"timeout": 30, "check_same_thread": False}
    engine = create_engine(url, **kwargs)
    if url.startswith("sqlite"):
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def redacted(url: str) -> str:
    """A database or broker URL with its password hidden, for logs and messages."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets the API write while the worker process reads; busy_timeout waits for the
    # other process's write lock instead of failing.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def get_engine(url: str) -> Engine:
    with _lock:
        engine = _engines.get(url)
        if engine is None:
            engine = _engines[url] = make_engine(url)
        return engine


def _forget_engines_in_child() -> None:
    """A forked process (a Celery pool child) opens its own connections: the parent's pooled
    ones (a thread of the parent may be using them) are left to the parent."""
    global _lock
    _lock = threading.Lock()  # the parent's may have been held by another thread at the fork
    for engine in _engines.values():
        engine.dispose(close=False)
    _engines.clear()
    _factories.clear()


os.register_at_fork(after_in_child=_forget_engines_in_child)


def dispose_engines() -> None:
    with _lock:
        for engine in _engines.values():
            engine.dispose()
        _engines.clear()
        _factories.clear()


@contextmanager
def session_scope(url: str) -> Iterator[Session]:
    """A session that commits on success and rolls back on error."""
    factory = _factories.get(url)
    if factory is None:  # one per engine: building one costs more than the session it opens
        factory = sessionmaker(bind=get_engine(url), expire_on_commit=False)
        with _lock:
            _factories[url] = factory
    session = factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def database_reachable(url: str) -> tuple[bool, str]:
    """Whether the database at ``url`` answers a query, and why not ("ok" when it does)."""
    try:
        with get_engine(url).connect() as conn:
            conn.execute(text("SELECT 1"))
        return True, "ok"
    except Exception as exc:
        return False, f"{type(exc).__name__}: {exc}"
