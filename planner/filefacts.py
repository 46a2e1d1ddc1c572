"""What the selector's signals learn per upstream file, kept on disk between decisions.

A release step's signals look at about a thousand changed files at both revisions (which
changed statements touch only other devices' code, which functions register aten ops, which
names each function uses). Parsing them again for every decision cost minutes;
:class:`FileFactsStore` keeps the answers beside the change facts, keyed by the files'
contents (the selector hashes them) and by a digest of the selector's code, so a warm decision
parses nothing and an edit to a signal never reads an answer of the old code.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import selector
from selector import MEMO_VERSION

log = logging.getLogger(__name__)


@functools.cache
def selector_fingerprint() -> str:
    """A digest of the selector's signal and model code."""
    root = Path(selector.__file__).parent
    digest = hashlib.blake2b(digest_size=8)
    for module in sorted([root / "model.py", *(root / "signals").glob("*.py")]):
        digest.update(module.name.encode())
        digest.update(module.read_bytes())
    return digest.hexdigest()


class FileFactsStore(MutableMapping[str, Any]):
    """One JSON file per key under ``root``; writes are atomic, so planners in several
    processes may share it. An unreadable entry reads as missing (it is computed again)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).expanduser() / f"v{MEMO_VERSION}-{selector_fingerprint()}"

    def __repr__(self) -> str:
        return f"FileFactsStore({str(self.root)!r})"

    def _path(self, key: str) -> Path:
        name = hashlib.blake2b(key.encode(), digest_size=16).hexdigest()
        return self.root / name[:2] / f"{name}.json"

    def __getitem__(self, key: str) -> Any:
        path = self._path(key)
        try:
            data = json.loads(path.read_bytes())
        except FileNotFoundError:
            raise KeyError(key) from None
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable file facts %s: %s", path, exc)
            raise KeyError(key) from None
        if not isinstance(data, dict) or data.get("key") != key:
            raise KeyError(key)
        return data.get("value")

    def __setitem__(self, key: str, value: Any) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"key": key, "value": value}, sort_keys=True))
        tmp.replace(path)

    def __delitem__(self, key: str) -> None:
        try:
            self._path(key).unlink()
        except FileNotFoundError:
            raise KeyError(key) from None

    def _paths(self) -> Iterator[Path]:
        return iter(sorted(self.root.glob("*/*.json")))

    def __iter__(self) -> Iterator[str]:
        for path in self._paths():
            try:
                yield json.loads(path.read_bytes())["key"]
            except (OSError, ValueError, KeyError, TypeError):
                continue

    def __len__(self) -> int:
        return sum(1 for _ in self._paths())


def store_for(source: object) -> FileFactsStore | None:
    """The store beside an upstream source's cache (its change facts), if it has one."""
    cache = getattr(source, "cache_dir", None)
    return FileFactsStore(Path(cache) / "filefacts") if cache else None
