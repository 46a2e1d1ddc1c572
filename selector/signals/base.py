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
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from selector.model import ChangeUnit, Universe
from upstream.changes import ChangeFacts
from upstream.changes import python as py

log = logging.getLogger(__name__)


@dataclass
class SignalConfig:
    """Inputs signals may use besides the facts; all optional, all offline. The planner gives
    the paths (the selector reads no settings)."""

    # PyTorch's td_heuristic_profiling.json (the planner's default: the CI-statistics folder's)
    profiling_map: Path | None = None
    coverage_map: Path | None = None  # ours: {source path: [test file or test id, ...]}
    import_map: Path | None = None  # inventory.importmap: modules our runs import
    # inputs the planner could not give this time, one sentence each (the impact stage's notes
    # say them first: a plan made without a signal says which and why)
    unavailable: tuple[str, ...] = ()
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
    # per-file facts kept between decisions (see :meth:`file_facts`); None: this process's
    memo: MutableMapping[str, Any] | None = None
    _trees: dict[tuple[str, bool], ast.Module | None] = field(default_factory=dict)
    _digests: dict[tuple[str, bool], str] = field(default_factory=dict)

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

    def digest(self, path: str, *, at_base: bool = False) -> str:
        """A digest of the file's content at head (or base) (:func:`content_digest`); ``-``
        when it cannot be read. A reader with a ``digest(path, at_base)`` attribute (a stored
        step's, which keeps the digests and not the files) answers it without the content."""
        key = (path, at_base)
        if key not in self._digests:
            known = getattr(self.reader, "digest", None)
            got = known(path, at_base) if callable(known) else None
            if got is None:
                data = self.read(path, at_base=at_base)
                got = "-" if data is None else content_digest(data)
            self._digests[key] = got
        return self._digests[key]

    def file_facts(
        self,
        kind: str,
        sides: Sequence[tuple[str, bool]],
        names: Iterable[str],
        compute: Callable[[list[str]], Mapping[str, Any]],
    ) -> dict[str, Any]:
        """name -> what a signal learned about ``names`` from the files ``sides`` ((path,
        at_base) pairs), computed by ``compute(missing names)`` only for the names not known yet
        for the same file contents. Values are JSON data (lists, not tuples or sets), so the
        caller may keep ``memo`` on disk; without one they are kept in this process. A warm
        decision reads the files to hash them but does not parse them again."""
        key = f"{kind}/{MEMO_VERSION}/" + "|".join(
            f"{path}@{'base' if at_base else 'head'}:{self.digest(path, at_base=at_base)}"
            for path, at_base in sides
        )
        memo = self.memo if self.memo is not None else _MEMO
        try:
            known = memo.get(key)
        except (OSError, ValueError) as exc:  # an unreadable entry is computed again
            log.warning("ignoring file facts %s: %s", key, exc)
            known = None
        got: dict[str, Any] = dict(known) if isinstance(known, Mapping) else {}
        missing = [n for n in dict.fromkeys(names) if n not in got]
        if missing:
            got.update(compute(missing))
            if memo is _MEMO and key not in _MEMO and len(_MEMO) >= _MEMO_MAX:
                _MEMO.pop(next(iter(_MEMO)))
            try:
                memo[key] = got
            except OSError as exc:  # a full disk costs the next decision time, not this one
                log.warning("cannot keep file facts %s: %s", key, exc)
        return got

    def file_fact(
        self, kind: str, sides: Sequence[tuple[str, bool]], compute: Callable[[], Any]
    ) -> Any:
        """:meth:`file_facts` for one value per file contents."""
        return self.file_facts(kind, sides, [""], lambda _: {"": compute()})[""]


def content_digest(data: bytes) -> str:
    """The digest of a file's content that keys the signals' file facts."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


# bump when what a signal keeps per file changes meaning (the planner's disk memo is also
# keyed by a digest of the selector's code)
MEMO_VERSION = 2  # 2: the operators signal's callers include module-level bindings
_MEMO: dict[str, Any] = {}
_MEMO_MAX = 50_000


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
