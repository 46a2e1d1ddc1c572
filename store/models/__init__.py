"""Database models for the whole loop: upstream event in, dispatch, job, selection, results out,
one module per aggregate (``deliveries``, ``jobs``, ``selections``, ``results``, ``callbacks``,
``hud``); this package names every table, so importing it registers them all on ``Base``.

Designed up front so later features fill rows rather than reshape tables. Statuses are short
strings (validated in code by the enums beside each table) so the schema stays portable across SQLite and
PostgreSQL. Schema changes go through Alembic (``migrations/``); ``STORED_DATA_VERSION`` is the
number of the newest migration (1: initial schema; 2: shard leases; 3: the HUD's indexes and a
result's op and dtype; 4: a selection's variants as rows, SelectionTest; 5: the relay role's
outbox columns on Dispatch, CallbackNonce, CallbackRate and CrcrResult; 6: a job's
planning_started_at; 7: the outbox's publishing and check-run creation columns; 8: the check
run's updates as an outbox on Dispatch; 9: a result's full failure text, TestResult.failure_text;
12: a delivery's upstream_payload, and its normalized event filled for every stored delivery).
"""

from store.models.base import NAMING_CONVENTION, STORED_DATA_VERSION, Base, utcnow
from store.models.callbacks import (
    CallbackNonce,
    CallbackRate,
)
from store.models.deliveries import (
    CheckState,
    CheckUpdateState,
    Delivery,
    DeliveryState,
    Dispatch,
    DispatchState,
    Downstream,
    UpstreamRepo,
)
from store.models.hud import (
    CrcrResult,
    EvalReport,
)
from store.models.jobs import (
    Conclusion,
    Job,
    JobStatus,
    JobTransition,
    Shard,
    ShardState,
)
from store.models.results import (
    TestResult,
    TestStat,
)
from store.models.selections import (
    Selection,
    SelectionKind,
    SelectionTest,
)

__all__ = [
    "NAMING_CONVENTION",
    "STORED_DATA_VERSION",
    "Base",
    "CallbackNonce",
    "CallbackRate",
    "CheckState",
    "CheckUpdateState",
    "Conclusion",
    "CrcrResult",
    "Delivery",
    "DeliveryState",
    "Dispatch",
    "DispatchState",
    "Downstream",
    "EvalReport",
    "Job",
    "JobStatus",
    "JobTransition",
    "Selection",
    "SelectionKind",
    "SelectionTest",
    "Shard",
    "ShardState",
    "TestResult",
    "TestStat",
    "UpstreamRepo",
    "utcnow",
]
