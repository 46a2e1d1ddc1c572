"""The interface every stage-2 impact signal implements, and what it is given.

A signal looks at the change units and the universe and returns the variants it maps them to
(with a reason each) and the units it accounts for. A unit a signal accounts for with no variant
is fine (for example a test file that is not in the universe); a unit no signal accounts for
triggers the conservative fallback.
"""

from __future__ import annotations

import ast
import hashlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from selector.model import ChangeUnit, Universe
from store.settings import ci_stats_dir
from upstream.changes import ChangeFacts
from upstream.changes import python as py

log = logging.getLogger(__name__)

# PyTorch's td_heuristic_profiling.json in the CI-statistics folder (RELAY_CI_STATS); optional
DEFAULT_PROFILING_MAP = ci_stats_dir() / "td_heuristic_profiling.json"


@dataclass
class SignalConfig:
    """Inputs signals may use besides the facts; all optional, all offline."""

    profiling_map: Path | None = DEFAULT_PROFILING_MAP
    coverage_map: Path | None = None  # ours: {source path: [test file or test id, ...]}
    import_map: Path | None = None  # inventory.importmap: modules our runs import
    path_rules: tuple[Any, ...] | None = None  # None = selector.signals.paths.DEFAULT_RULES
    fallback: str = "suite"  # "suite": a changed universe file's own variants, else all; "all"
    # dispatch keys whose kernels the backend can run (its own, the CPU it falls back to and
    # compares with, the composite kernels, meta for shapes); a dispatch-only change to other
    # keys (CUDA, XPU, MPS, sparse, nested...) selects nothing
    relevant_dispatch_keys: frozenset[str] = frozenset(
        {
            "CPU",
            "PrivateUse1",
            "CompositeImplicitAutograd",
            "CompositeExplicitAutograd",
            "CompositeExplicitAutogradNonFunctional",
            "CompositeImplicitAutogradNestedTensor",
            "Meta",
            "Math",
            "DefaultBackend",
        }
    )
    # device names whose code paths the backend never takes (changes guarded by them are inert)
    other_devices: frozenset[str] = frozenset({"cuda", "xpu", "hpu", "mps", "rocm", "mtia", "xla"})


@dataclass
class SignalContext:
    facts: ChangeFacts
    units: list[ChangeUnit]
    universe: Universe
    config: SignalConfig = field(default_factory=SignalConfig)
    # reads a file at head (or at base when ``at_base``); None when no source is available
    reader: Callable[[str, bool], bytes | None] | None = None
    explained: Mapping[str, list[str]] = field(default_factory=dict)
    _trees: dict[tuple[str, bool], ast.Module | None] = field(default_factory=dict)

    def read(self, path: str, *, at_base: bool = False) -> bytes | None:
        if self.reader is None:
            return None
        try:
            return self.reader(path, at_base)
        except Exception as exc:  # a source error must not stop selection: the unit stays unmapped
            log.warning("cannot read %s: %s", path, exc)
            return None

    def tree(self, path: str, *, at_base: bool = False) -> ast.Module | None:
        key = (path, at_base)
        if key not in self._trees:
            data = self.read(path, at_base=at_base)
            self._trees[key] = parsed(data, path) if data is not None else None
        return self._trees[key]

    def unit_tree(self, unit: ChangeUnit) -> ast.Module | None:
        """The tree the unit lives in: head, or base when it was removed."""
        return self.tree(unit.path, at_base=unit.status == "removed")


_PARSED: dict[tuple[str, bytes], ast.Module | None] = {}
_PARSED_MAX = 256


def parsed(data: bytes, path: str) -> ast.Module | None:
    """The syntax tree of ``data`` (None when it does not parse), kept across decisions by
    content: a warm decision re-reads the changed files but does not re-parse them. Signals
    only read trees (they are shared by every signal of a decision already)."""
    key = (path, hashlib.blake2b(data, digest_size=16).digest())
    if key not in _PARSED:
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.pop(next(iter(_PARSED)))
        try:
            _PARSED[key] = py.parse(data, path)
        except (SyntaxError, ValueError):
            _PARSED[key] = None
    return _PARSED[key]


@dataclass
class SignalResult:
    hits: dict[str, list[str]] = field(default_factory=dict)  # test id -> reasons
    explained: dict[str, str] = field(default_factory=dict)  # unit key -> why

    def add(self, test_ids: Any, reason: str) -> None:
        for tid in test_ids:
            self.hits.setdefault(tid, []).append(reason)


@runtime_checkable
class ImpactSignal(Protocol):
    """One way of mapping changes to tests; ``closeness`` (0..1) ranks how direct it is."""

    name: str
    closeness: float
    # True: only look at units earlier signals left unexplained (coarse signals)
    only_unexplained: bool

    def map(self, ctx: SignalContext) -> SignalResult: ...
