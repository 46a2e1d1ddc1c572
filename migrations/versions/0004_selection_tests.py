"""a selection's variants as rows (selection_test)

The per-variant lists of a stored SelectionPlan (tests, cut, removed) move out of
``selection.plan`` into ``selection_test`` rows, which the API pages; ``plan`` keeps the rest
with the lists' sizes under ``counts``. Plans stored before are moved over (and back on
downgrade).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 15:00:00
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_selection = sa.table(
    "selection", sa.column("id", sa.Integer), sa.column("job_pk", sa.Integer),
    sa.column("plan", sa.JSON),
)  # fmt: skip
_COLUMNS = (
    "kind", "test_id", "rank", "shard", "risk", "seconds", "seconds_source", "mode", "gating",
    "flag", "signals", "reasons",
)  # fmt: skip


def upgrade() -> None:
    table = op.create_table(
        "selection_test",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("job_pk", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=10), nullable=False),
        sa.Column("test_id", sa.String(length=500), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=True),
        sa.Column("shard", sa.Integer(), nullable=True),
        sa.Column("risk", sa.Float(), nullable=True),
        sa.Column("seconds", sa.Float(), nullable=True),
        sa.Column("seconds_source", sa.String(length=30), nullable=True),
        sa.Column("mode", sa.String(length=30), nullable=True),
        sa.Column("gating", sa.Boolean(), nullable=True),
        sa.Column("flag", sa.String(length=30), nullable=True),
        sa.Column("signals", sa.JSON(), nullable=False),
        sa.Column("reasons", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_pk"], ["job.id"], name=op.f("fk_selection_test_job_pk_job"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_selection_test")),
        sa.UniqueConstraint(
            "job_pk", "kind", "test_id", name=op.f("uq_selection_test_job_pk_kind_test_id")
        ),
    )
    conn = op.get_bind()
    for sel_id, job_pk, plan in conn.execute(sa.select(_selection)).all():
        if not isinstance(plan, dict) or job_pk is None or "tests" not in plan:
            continue
        rows = _rows(plan)
        if rows:
            conn.execute(sa.insert(table), [{**r, "job_pk": job_pk} for r in rows])
        kept = {k: v for k, v in plan.items() if k not in ("tests", "cut", "removed", "shards")}
        kept["counts"] = {
            "selected": len(plan.get("tests") or []),
            "cut": len(plan.get("cut") or []),
            "removed": len(plan.get("removed") or []),
            "shards": [len(s) for s in plan.get("shards") or []],
        }
        conn.execute(sa.update(_selection).where(_selection.c.id == sel_id).values(plan=kept))


def _rows(plan: dict[str, Any]) -> list[dict[str, Any]]:
    shard_of = {t: i for i, shard in enumerate(plan.get("shards") or []) for t in shard}
    rows = [
        {**{k: t.get(k) for k in _COLUMNS}, "kind": "selected",
         "shard": shard_of.get(t.get("test_id")), "signals": t.get("signals") or [],
         "reasons": t.get("reasons") or []}
        for t in plan.get("tests") or []
    ]  # fmt: skip
    rows += [
        {**dict.fromkeys(_COLUMNS), "kind": "cut", "test_id": c.get("test_id"),
         "rank": c.get("rank"), "risk": c.get("risk"), "seconds": c.get("seconds"),
         "signals": [], "reasons": [c.get("reason")]}
        for c in plan.get("cut") or []
    ]  # fmt: skip
    rows += [
        {**dict.fromkeys(_COLUMNS), "kind": "removed", "test_id": r.get("test_id"),
         "signals": [], "reasons": [r.get("reason")]}
        for r in plan.get("removed") or []
    ]  # fmt: skip
    return rows


def downgrade() -> None:
    conn = op.get_bind()
    table = sa.table("selection_test", *(sa.column(c) for c in ("job_pk", "id", *_COLUMNS)))
    for sel_id, job_pk, plan in conn.execute(sa.select(_selection)).all():
        if not isinstance(plan, dict) or job_pk is None or "counts" not in plan:
            continue
        rows = conn.execute(
            sa.select(table).where(table.c.job_pk == job_pk).order_by(table.c.id)
        ).mappings()
        tests: list[dict[str, Any]] = []
        cut: list[dict[str, Any]] = []
        removed: list[dict[str, Any]] = []
        shards: list[list[str]] = [[] for _ in plan["counts"].get("shards") or []]
        for r in rows:
            if r["kind"] == "selected":
                tests.append({k: r[k] for k in _COLUMNS if k not in ("kind", "shard")})
                if r["shard"] is not None and r["shard"] < len(shards):
                    shards[r["shard"]].append(r["test_id"])
            elif r["kind"] == "cut":
                cut.append({"test_id": r["test_id"], "rank": r["rank"], "risk": r["risk"],
                            "seconds": r["seconds"], "reason": (r["reasons"] or [""])[0]})  # fmt: skip
            else:
                removed.append({"test_id": r["test_id"], "reason": (r["reasons"] or [""])[0]})
        full = {k: v for k, v in plan.items() if k != "counts"}
        full.update(tests=tests, cut=cut, removed=removed, shards=shards)
        conn.execute(sa.update(_selection).where(_selection.c.id == sel_id).values(plan=full))
    op.drop_table("selection_test")
