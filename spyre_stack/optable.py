"""The op support table (``spyre_stack/ops.yaml``) and its loader.

>>> table = load()
>>> table.status("add_", policy="permissive")
'native'

``status`` answers for any aten op name (``aten::add_.Tensor``, ``add.out`` and ``add`` are the
same entry). Under policy ``permissive`` an op missing from the table gets ``default_status``
(``fallback``); under ``strict`` it is ``unsupported``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import yaml

TABLE_PATH = Path(__file__).resolve().parent / "ops.yaml"
STATUSES = ("native", "fallback", "unsupported")
STATUS_CODES = {"native": 0, "fallback": 1, "unsupported": 2}
KINDS = (
    "pointwise",
    "special",
    "reduction",
    "matmul",
    "softmax",
    "norm",
    "movement",
    "random",
    "other",
)


class OpTableError(ValueError):
    """The table file is malformed; the message names every problem found."""


@dataclass(frozen=True)
class OpEntry:
    name: str
    status: str
    kind: str
    dtypes: tuple[str, ...]
    exact: bool = False  # selects input elements: a down-cast dtype is not rounded (amax...)

    def exact_dtypes(self, downcast: frozenset[str] = frozenset({"float32"})) -> tuple[str, ...]:
        """dtypes whose results keep the dtype's own precision (no fp16 down-cast)."""
        return tuple(d for d in self.dtypes if d not in downcast)


@dataclass(frozen=True)
class OpTable:
    version: int
    default_status: str
    entries: dict[str, OpEntry]
    path: Path = TABLE_PATH
    numerics: dict[str, str] = field(default_factory=dict)

    def entry(self, op: str) -> OpEntry | None:
        return self.entries.get(base_name(op))

    def status(self, op: str, policy: str = "permissive") -> str:
        found = self.entry(op)
        if found is not None:
            return found.status
        return self.default_status if policy == "permissive" else "unsupported"

    def kind(self, op: str) -> str:
        found = self.entry(op)
        return found.kind if found else "other"

    def summary(self) -> dict[str, int]:
        counts = Counter(e.status for e in self.entries.values())
        return {s: counts.get(s, 0) for s in STATUSES}

    def by_status(self, status: str) -> list[OpEntry]:
        return sorted(
            (e for e in self.entries.values() if e.status == status), key=lambda e: e.name
        )


def base_name(op: str) -> str:
    """``aten::add_.Tensor`` -> ``add``; dunder names keep their underscores."""
    name = op.split("::", 1)[-1].split(".", 1)[0]
    if len(name) > 1 and name.endswith("_") and not name.endswith("__"):
        name = name[:-1]
    return name


def load(path: Path | str | None = None) -> OpTable:
    """Load and validate the table (cached for the default path)."""
    if path is None:
        return _load_default()
    return _parse(Path(path))


@lru_cache(maxsize=1)
def _load_default() -> OpTable:
    return _parse(TABLE_PATH)


def _parse(path: Path) -> OpTable:
    raw = yaml.safe_load(path.read_text())
    errors: list[str] = []
    if not isinstance(raw, dict):
        raise OpTableError(f"{path}: top level must be a mapping")
    default = raw.get("default_status", "fallback")
    if default not in ("native", "fallback", "unsupported"):
        errors.append(f"{path}: default_status {default!r} is not one of {STATUSES}")
    entries: dict[str, OpEntry] = {}
    for name, spec in (raw.get("ops") or {}).items():
        if not isinstance(spec, dict):
            errors.append(f"{path}: op {name!r}: entry must be a mapping")
            continue
        status = spec.get("status")
        kind = spec.get("kind", "other")
        dtypes = spec.get("dtypes", [])
        if status not in STATUSES:
            errors.append(f"{path}: op {name!r}: status {status!r} is not one of {STATUSES}")
        if kind not in KINDS:
            errors.append(f"{path}: op {name!r}: kind {kind!r} is not one of {KINDS}")
        if not isinstance(dtypes, list) or not all(isinstance(d, str) for d in dtypes):
            errors.append(f"{path}: op {name!r}: dtypes must be a list of dtype names")
            dtypes = []
        exact = spec.get("exact", False)
        if not isinstance(exact, bool):
            errors.append(f"{path}: op {name!r}: exact must be true or false")
        if base_name(name) != name:
            errors.append(f"{path}: op {name!r}: use the base name {base_name(name)!r}")
        entries[name] = OpEntry(name, str(status), str(kind), tuple(dtypes), exact is True)
    if errors:
        raise OpTableError("\n".join(errors))
    return OpTable(
        version=int(raw.get("version", 1)),
        default_status=default,
        entries=entries,
        path=path,
        numerics=dict(raw.get("numerics") or {}),
    )
