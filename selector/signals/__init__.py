"""Stage-2 impact signals: one class each behind :class:`ImpactSignal`, registered in SIGNALS.

Signals run in the registry's order; coarse ones (``only_unexplained``) only see the units the
ones before them left unexplained.
"""

from __future__ import annotations

from collections.abc import Callable

from selector.signals.base import (
    MEMO_VERSION,
    ImpactSignal,
    SignalConfig,
    SignalContext,
    SignalResult,
    content_digest,
)
from selector.signals.behaviour import BehaviourChanges
from selector.signals.coverage import CoverageMap
from selector.signals.dbentries import DatabaseEntries, InfoClasses
from selector.signals.devices import OtherDevicesOnly
from selector.signals.edited import EditedTests
from selector.signals.imports import NotImported
from selector.signals.operators import Operators
from selector.signals.paths import PathRules
from selector.signals.testimports import TestImports
from selector.signals.traced import TracedCommon, TracedCoverage

SIGNALS: dict[str, Callable[[], ImpactSignal]] = {
    "import-map": NotImported,
    "other-devices-only": OtherDevicesOnly,
    "edited-tests": EditedTests,
    "test-imports": TestImports,
    "opinfo-moduleinfo": DatabaseEntries,
    "opinfo-class": InfoClasses,
    "behaviour": BehaviourChanges,
    "operators": Operators,
    "traced-coverage": TracedCoverage,
    "traced-common": TracedCommon,
    "coverage": CoverageMap,
    "path-rules": PathRules,
}

__all__ = [
    "MEMO_VERSION",
    "SIGNALS",
    "ImpactSignal",
    "SignalConfig",
    "SignalContext",
    "SignalResult",
    "content_digest",
]
