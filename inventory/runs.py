"""Where the full runs of a universe are cached (``RELAY_VAR_DIR/eval/runs``): one key per universe, shared
by the ground truth that writes them (:mod:`evaluation.groundtruth`) and the planner that learns
durations and failures from the run of the base release (:mod:`planner.durations`).
"""

from __future__ import annotations

import hashlib

from selector.model import Universe

# Bump when what a run records changes: cached runs of another version are not reused.
# 2: outcomes folded like every other plugin of ours (testspecs.outcomes: error, xfailed, xpassed)
RUNS_VERSION = 2


def run_key(universe: Universe) -> str:
    """The universe's part of a run's file name: its torch build and backend version (its
    ``key``), its files and its size."""
    files = ",".join(sorted(universe.by_file))
    text = f"{RUNS_VERSION}|{universe.key}|{files}|{len(universe)}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]
