"""The device model (``spyre_stack/device_model.yaml``): what the real card supports, with sources.

>>> model = load()
>>> model.row("float64").card
'refused'

One row per dtype, op without a device kernel, copy, resize or numerics rule. ``card`` is
``native``, ``downcast``, ``refused`` or ``unknown``; a refused row carries the error the real stack
raises, and every row names its public source. Under ``SPYRE_DEVICE_MODEL=card`` (the default)
the simulator raises those errors (:meth:`DeviceModel.refusals` is what
:mod:`spyre_stack.runtime.state` pushes into the core); under ``simulator`` it keeps its own
behaviour and the table is informational. Unknown rows never change the simulator.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

MODEL_PATH = Path(__file__).resolve().parent / "device_model.yaml"
KINDS = ("dtype", "op", "copy", "resize", "numerics")
CARD = ("native", "downcast", "refused", "unknown")
MODES = ("simulator", "card")
_DEVICE_COPY_OP = "_copy_from"
_RESIZE_OP = "resize_"


class DeviceModelError(ValueError):
    """The table file is malformed; the message names every problem found."""


@dataclass(frozen=True)
class Row:
    kind: str
    subject: str
    card: str
    source: str
    error: str = ""
    op: str = ""

    @property
    def key(self) -> str:
        """What the simulator checks: the dtype, the op key, or the copy / resize op."""
        return self.op or self.subject


@dataclass(frozen=True)
class Refusals:
    """What the core refuses under ``SPYRE_DEVICE_MODEL=card``."""

    dtypes: tuple[str, ...]
    device_copy: bool
    resize: bool
    ops: dict[str, str]  # op key -> "<error kind>|<source>"


@dataclass(frozen=True)
class DeviceModel:
    version: int
    rows: tuple[Row, ...]
    path: Path = MODEL_PATH

    def row(self, key: str) -> Row | None:
        return next((r for r in self.rows if r.key == key), None)

    def by_kind(self, kind: str) -> list[Row]:
        return [r for r in self.rows if r.kind == kind]

    def refusals(self) -> Refusals:
        refused = [r for r in self.rows if r.card == "refused"]
        ops: dict[str, str] = {}
        for r in refused:
            if r.kind == "op":
                ops[r.key] = f"no-kernel|{r.source}"
            elif r.kind == "copy" and r.key != _DEVICE_COPY_OP:
                ops[r.key] = f"in-device-copy|{r.source}"
        return Refusals(
            dtypes=tuple(r.key for r in refused if r.kind == "dtype"),
            device_copy=any(r.kind == "copy" and r.key == _DEVICE_COPY_OP for r in refused),
            resize=any(r.kind == "resize" and r.key == _RESIZE_OP for r in refused),
            ops=ops,
        )

    def summary(self) -> dict[str, int]:
        return {c: sum(r.card == c for r in self.rows) for c in CARD}


def load(path: Path | str | None = None) -> DeviceModel:
    """Load and validate the table (cached for the default path)."""
    return _load_default() if path is None else _parse(Path(path))


@lru_cache(maxsize=1)
def _load_default() -> DeviceModel:
    return _parse(MODEL_PATH)


def _parse(path: Path) -> DeviceModel:
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(raw, dict) or not isinstance(raw.get("rows"), list):
        raise DeviceModelError(f"{path}: top level must be a mapping with a list of rows")
    errors: list[str] = []
    rows: list[Row] = []
    for i, spec in enumerate(raw["rows"]):
        where = f"{path}: rows[{i}]"
        if not isinstance(spec, dict):
            errors.append(f"{where}: must be a mapping")
            continue
        problems = _row_problems(spec)
        errors += [f"{where} ({spec.get('subject')!r}): {p}" for p in problems]
        if not problems:
            rows.append(
                Row(
                    kind=spec["kind"],
                    subject=str(spec["subject"]),
                    card=spec["card"],
                    source=str(spec["source"]),
                    error=str(spec.get("error", "")),
                    op=str(spec.get("op", "")),
                )
            )
    keys = [r.key for r in rows]
    errors += [
        f"{path}: {k!r} has two rows" for k in sorted({k for k in keys if keys.count(k) > 1})
    ]
    if errors:
        raise DeviceModelError("\n".join(errors))
    return DeviceModel(version=int(raw.get("version", 1)), rows=tuple(rows), path=path)


def _row_problems(spec: dict[str, object]) -> list[str]:
    out = []
    if spec.get("kind") not in KINDS:
        out.append(f"kind {spec.get('kind')!r} is not one of {KINDS}")
    if spec.get("card") not in CARD:
        out.append(f"card {spec.get('card')!r} is not one of {CARD}")
    if not str(spec.get("subject") or "").strip():
        out.append("subject is empty")
    source = str(spec.get("source") or "").strip()
    if not source:
        out.append("source is empty (say 'unknown: ...' when the public record says nothing)")
    if spec.get("card") == "refused" and not str(spec.get("error") or "").strip():
        out.append("a refused row must give the error the real stack raises")
    if spec.get("card") == "unknown" and not source.startswith("unknown"):
        out.append("an unknown row's source must start with 'unknown'")
    if (
        spec.get("kind") in ("copy", "resize")
        and spec.get("card") == "refused"
        and not spec.get("op")
    ):
        out.append("a refused copy or resize row must name the op the simulator refuses")
    unknown = set(spec) - {"kind", "subject", "card", "source", "error", "op"}
    if unknown:
        out.append(f"unknown field(s) {sorted(unknown)}")
    return out
