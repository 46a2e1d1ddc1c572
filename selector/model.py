"""The selector's model: the values that flow into and between the four selection stages.

A :class:`Variant` is one collected test of the backend; the :class:`Universe` is all of them at
the head revision; :class:`History` is what earlier runs taught (durations, failures, flakiness);
a :class:`ChangeUnit` is one thing that changed upstream. Per-item values are small dataclasses
(a release step handles hundreds of thousands of variants); the stored plan is pydantic
(:mod:`selector.plan`). Every stage returns a :class:`StageRecord` with its counts in and out, so
the funnel is data.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol


@dataclass
class Variant:
    test_id: str
    file: str
    cls: str | None
    name: str
    base: str
    suite: str
    op: str | None = None
    module: str | None = None
    dtype: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    marks: list[str] = field(default_factory=list)
    static_skip: str | None = None
    via: str | None = None  # generated wrapper module that instantiates this variant's class
    decision: str | None = None  # spec mode; "skip" = not run; None = no spec given
    rule: str | None = None
    tags: list[str] = field(default_factory=list)
    duration: float | None = None
    duration_source: str | None = None

    @property
    def node_id(self) -> str:
        """What pytest is given to run it: the test id, or the wrapper module's node id for a
        class instantiated through a generated wrapper (``via``)."""
        return f"{self.via}::{self.cls}::{self.name}" if self.via else self.test_id


@dataclass
class TestHistory:
    seconds: float | None = None  # runner-seconds (setup + call + teardown on a runner)
    runs: int = 0
    failures: int = 0
    flaky: bool = False
    device_seconds: float | None = None  # simulated device time, shown beside, never budgeted


@dataclass
class History:
    tests: dict[str, TestHistory] = field(default_factory=dict)

    def get(self, test_id: str) -> TestHistory | None:
        return self.tests.get(test_id)

    @classmethod
    def load(cls, path: str | Path | None) -> History:
        """JSON ``{test id: seconds}`` or ``{test id: {seconds, runs, failures, flaky,
        device_seconds}}``; seconds are runner-seconds."""
        if path is None:
            return cls()
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return cls.from_mapping(data.get("tests", data))

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> History:
        tests = {}
        for tid, row in data.items():
            if isinstance(row, int | float):
                tests[tid] = TestHistory(seconds=float(row))
            else:
                tests[tid] = TestHistory(
                    seconds=row.get("seconds"),
                    runs=int(row.get("runs", 0)),
                    failures=int(row.get("failures", 0)),
                    flaky=bool(row.get("flaky", False)),
                    device_seconds=row.get("device_seconds"),
                )
        return cls(tests)


class DurationEstimate(Protocol):
    """Seconds a variant without history is expected to take: runner-seconds for the budget
    (:mod:`planner.durations`), or simulated device-seconds shown beside them (a backend's
    device-time hook, :meth:`backends.base.Backend.duration_estimate`). An estimate may also
    name the source of each variant's number (``source_of(v)``)."""

    @property
    def source(self) -> str: ...

    def seconds(self, v: Variant) -> float: ...


def source_of(estimate: DurationEstimate, v: Variant) -> str:
    """Where ``estimate`` takes ``v``'s seconds from (its own per-variant answer when it has one)."""
    per_variant = getattr(estimate, "source_of", None)
    return str(per_variant(v)) if per_variant is not None else estimate.source


# universe flags: where a variant comes from when the head revision is not the installed one
NEW_AT_HEAD = "new-at-head"
REMOVED_AT_HEAD = "removed-at-head"


def applicable(universe: Universe, v: Variant) -> bool:
    """What the applicability stage keeps of every variant: not skipped by a spec or by its
    test file, not gone at head."""
    return (
        universe.flags.get(v.test_id) != REMOVED_AT_HEAD
        and v.decision != "skip"
        and not v.static_skip
    )


@dataclass(frozen=True)
class Costs:
    """What the variants of one universe cost, as the planner prices them: runner-seconds from
    ``history``, else ``runner`` (the budget's unit); simulated device-seconds from
    ``history``, else ``device`` (shown beside, never budgeted); and the applicable universe's
    totals of both (:func:`price` sums them once, so decisions over the same universe and
    estimates do not price every variant again)."""

    history: History
    runner: DurationEstimate
    device: DurationEstimate
    applicable_runner_seconds: float
    applicable_device_seconds: float
    variants: int  # the size of the universe priced (a request over another one is refused)


def price(
    universe: Universe, *, history: History, runner: DurationEstimate, device: DurationEstimate
) -> Costs:
    """:class:`Costs` of ``universe``: its applicable variants priced once."""
    full = full_device = 0.0
    for v in universe.variants:
        if not applicable(universe, v):
            continue
        h = history.get(v.test_id)
        full += h.seconds if h is not None and h.seconds is not None else runner.seconds(v)
        full_device += (
            h.device_seconds
            if h is not None and h.device_seconds is not None
            else device.seconds(v)
        )
    return Costs(
        history=history,
        runner=runner,
        device=device,
        applicable_runner_seconds=full,
        applicable_device_seconds=full_device,
        variants=len(universe),
    )


@dataclass(frozen=True)
class StageRecord:
    stage: str
    count_in: int
    count_out: int
    unit: str
    seconds: float = 0.0
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class ChangeUnit:
    """One thing that changed upstream, the granularity signals map and the fallback counts.

    ``key`` is unique: ``path::qualname`` for a Python symbol, ``path`` for any other file,
    ``native_functions:add.Tensor``, ``derivatives:mul.Tensor``, ``opinfo:add``,
    ``moduleinfo:torch.nn.Linear``, ``behaviour:combinations``.
    """

    key: str
    kind: str  # symbol | file | native_function | derivative | opinfo | moduleinfo | behaviour
    path: str
    status: str
    detail: str = ""


@dataclass
class Universe:
    """The variants that exist for the backend at the head revision (or our best knowledge).

    ``flags`` marks how a variant relates to the base release: ``new-at-head`` (added from
    the change facts, or collected at head and absent at base) or ``removed-at-head`` (collected
    at base, gone at head).
    """

    variants: list[Variant]
    label: str
    kind: str = "bundled"  # bundled | checkout | synthetic | installed+facts
    flags: dict[str, str] = field(default_factory=dict)
    key: str = ""  # torch build and backend version the variants were collected with

    def __len__(self) -> int:
        return len(self.variants)

    @cached_property
    def by_id(self) -> dict[str, Variant]:
        return {v.test_id: v for v in self.variants}

    @cached_property
    def by_file(self) -> dict[str, list[Variant]]:
        return self._indexes[0]

    @cached_property
    def by_op_key(self) -> dict[str, list[Variant]]:
        """aten-style operator key -> variants (see :func:`op_keys`)."""
        return self._indexes[2]

    @cached_property
    def by_op(self) -> dict[str, list[Variant]]:
        return self._indexes[1]

    @cached_property
    def by_module(self) -> dict[str, list[Variant]]:
        return self._indexes[3]

    @cached_property
    def by_test(self) -> dict[tuple[str, str], list[Variant]]:
        """(file, generic test name ``Class.test_x`` or ``test_x``) -> variants."""
        return _group_pairs(self.variants)

    @cached_property
    def files(self) -> set[str]:
        return set(self.by_file)

    @cached_property
    def _indexes(self) -> tuple[dict[str, list[Variant]], ...]:
        """by file, op, op key and module, in one pass over the variants, each group in
        universe order. A value's groups are looked up once per distinct value (a universe
        has many variants per file, op and module), not once per variant."""
        by_file: dict[str, list[Variant]] = {}
        by_op: dict[str, list[Variant]] = {}
        by_op_key: dict[str, list[Variant]] = {}
        by_module: dict[str, list[Variant]] = {}
        op_groups: dict[str, list[list[Variant]]] = {}
        module_groups: dict[str, list[Variant]] = {}
        for v in self.variants:
            group = by_file.get(v.file)
            if group is None:
                by_file[v.file] = [v]
            else:
                group.append(v)
            op = v.op
            if op:
                groups = op_groups.get(op)
                if groups is None:
                    groups = [by_op.setdefault(op, [])]
                    groups += [by_op_key.setdefault(k, []) for k in op_keys(op)]
                    op_groups[op] = groups
                for group in groups:
                    group.append(v)
            module = v.module
            if module:
                group = module_groups.get(module)
                if group is None:
                    group = module_groups[module] = by_module.setdefault(module_key(module), [])
                group.append(v)
        return by_file, by_op, by_op_key, by_module


def _group_pairs(variants: Iterable[Variant]) -> dict[tuple[str, str], list[Variant]]:
    out: dict[tuple[str, str], list[Variant]] = defaultdict(list)
    for v in variants:
        out[(v.file, generic_test_name(v))].append(v)
    return dict(out)


_DEVICE_SUFFIXES = ("PRIVATEUSE1", "SPYRE", "CPU", "CUDA", "META")


def generic_class(cls: str | None) -> str | None:
    if cls is None:
        return None
    for suffix in _DEVICE_SUFFIXES:
        if cls.endswith(suffix) and len(cls) > len(suffix):
            return cls[: -len(suffix)]
    return cls


def generic_test_name(v: Variant) -> str:
    cls = generic_class(v.cls)
    return f"{cls}.{v.base}" if cls else v.base


_NAMESPACES = {"linalg": "linalg_", "special": "special_", "fft": "fft_", "sparse": "sparse_"}


def op_keys(op: str) -> list[str]:
    """aten-style keys an OpInfo name answers to.

    ``nn.functional.gelu`` -> ``gelu``; ``linalg.norm.subgradients_at_zero`` -> ``linalg_norm``;
    ``add`` -> ``add``; ``_refs.abs`` -> ``abs``. The full name is always a key too.
    """
    parts = op.split(".")
    keys = [op]
    if parts[:2] == ["nn", "functional"] and len(parts) > 2:
        keys.append(parts[2])
    elif parts[0] in ("_refs", "_prims", "ops") and len(parts) > 1:
        keys.append(parts[-1] if parts[1] not in _NAMESPACES else _NAMESPACES[parts[1]] + parts[2])
    elif parts[0] in _NAMESPACES and len(parts) > 1:
        keys.append(_NAMESPACES[parts[0]] + parts[1])
    else:
        keys.append(parts[0])
    return list(dict.fromkeys(keys))


def aten_key(name: str) -> str:
    """``aten::add_.Tensor`` / ``add.out`` / ``add_`` -> ``add`` (in-place and overloads folded)."""
    base = name.split("::", 1)[-1].split(".", 1)[0]
    if len(base) > 1 and base.endswith("_") and not base.endswith("__"):
        base = base[:-1]
    return base


def module_key(name: str) -> str:
    """``torch.nn.Linear`` and ``nn.Linear`` -> ``nn.Linear``."""
    return name.removeprefix("torch.")


@dataclass(frozen=True)
class Candidate:
    """A variant stage 2 chose, with every reason and the closest signal's weight."""

    test_id: str
    reasons: tuple[str, ...]
    signals: tuple[str, ...]
    closeness: float


@dataclass(frozen=True)
class Removed:
    test_id: str
    reason: str


@dataclass(frozen=True)
class Applicable:
    test_id: str
    mode: str  # spec mode, or "run" without a spec
    gating: bool
    reasons: tuple[str, ...]
    signals: tuple[str, ...]
    closeness: float
    flag: str | None = None


@dataclass(frozen=True)
class Ranked:
    """A selected test: the one per-test selection record. The plan lists these
    (``SelectionPlan.tests``, in this field order in its JSON); the store keeps each as a
    ``selection_test`` row (these fields, plus ``kind`` and the runner's ``shard``) and the jobs
    API serves that row."""

    test_id: str
    rank: int
    risk: float
    seconds: float  # runner-seconds
    seconds_source: str
    mode: str
    gating: bool
    signals: tuple[str, ...]
    reasons: tuple[str, ...]
    flag: str | None = None


@dataclass(frozen=True)
class Cut:
    test_id: str
    rank: int
    risk: float
    seconds: float
    reason: str


@dataclass(frozen=True)
class Fallback:
    """A conservative choice made because some change mapped to nothing known."""

    scope: str  # "suite:<file>" | "all"
    units: tuple[str, ...]
    reason: str
    tests: int


@dataclass
class ImpactResult:
    candidates: dict[str, Candidate]
    explained: dict[str, list[str]]  # change unit -> "signal: why" lines
    unexplained: list[ChangeUnit]
    fallbacks: list[Fallback]
    per_signal: dict[str, int]
    record: StageRecord


@dataclass
class ApplicabilityResult:
    kept: list[Applicable]
    removed: list[Removed]
    record: StageRecord


@dataclass
class BudgetResult:
    selected: list[Ranked]  # in rank order; the runner splits them into shards
    cut: list[Cut]
    budget_seconds: float | None  # runner-seconds
    selected_seconds: float  # runner-seconds
    record: StageRecord
    triage: str | None = None
    selected_device_seconds: float = 0.0  # simulated, beside
