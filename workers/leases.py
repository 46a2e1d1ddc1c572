"""A lease kept alive while a stage works: a renewal every third of its length, from a thread of
the worker's process, so the sweeper hands the work on only when that process is gone."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from sqlalchemy.orm import Session

from store.db import session_scope

log = logging.getLogger("workers.leases")


@contextmanager
def renewed(
    renew: Callable[[Session, float], object], *, database_url: str, lease: float, name: str
) -> Iterator[None]:
    """Call ``renew(session, lease)`` every ``lease / 3`` seconds until the block ends; a failed
    renewal (a database blip) is logged and the next one tries again."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(lease / 3):
            try:
                with session_scope(database_url) as session:
                    renew(session, lease)
            except Exception:
                log.warning("lease not renewed", extra={"lease": name}, exc_info=True)

    renewer = threading.Thread(target=loop, name=name, daemon=True)
    renewer.start()
    try:
        yield
    finally:
        stop.set()
        renewer.join()
