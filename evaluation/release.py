"""The ground truth of a release step: the whole bundled universe under both torches, compared
(:func:`evaluation.groundtruth.release_ground_truth`); ``relay eval --kind release`` scores the
release plans (:mod:`planner.release`) against it.
"""

from __future__ import annotations

from collections.abc import Callable

from evaluation.groundtruth import release_ground_truth
from evaluation.scores import GroundTruth
from selector import Universe
from upstream.changes import ChangeFacts
from upstream.headenv import HeadEnv


def release_truth(
    facts: ChangeFacts,
    *,
    installed: Universe,
    env: HeadEnv,
    head: Universe,
    run: bool,
    base_env: HeadEnv | None = None,
    log: Callable[[str], None] = lambda _: None,
    progress: Callable[[str, int, int], None] | None = None,
) -> GroundTruth:
    """``installed`` is the base universe: collected under this interpreter's torch, or under
    ``base_env``'s when the base release is not the installed one (it runs there too)."""
    return release_ground_truth(
        installed,
        head,
        name=f"{facts.base.resolved} -> {facts.head.resolved}",
        changed_files=[f.path for f in facts.files],
        head_python=str(env.python),
        head_env=env.env,
        base_python=str(base_env.python) if base_env is not None else None,
        base_env=base_env.env if base_env is not None else None,
        run=run,
        log=log,
        progress=progress,
    )
