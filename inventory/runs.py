"""Where the full runs of a universe are cached (``RELAY_VAR_DIR/eval/runs``): one key per universe, shared
by the ground truth that writes them (:mod:`evaluation.groundtruth`) and the planner that learns
durations and failures from the run of the base release (:mod:`planner.durations`).
"""

from __future__ import annotations

import hashlib

from selector.model import Universe

# Bump when what a run records changes: cached runs of another version are not reused.
# 2: outcomes folded like every other plugin of ours (testspecs.outcomes: error, xfailed, xpassed)
# 3: keyed by the suites' revision (the universe's label) and the backend's device settings too
RUNS_VERSION = 3


def run_key(universe: Universe, settings: str = "") -> str:
    """The universe's part of a run's file name: its torch build and backend version (its
    ``key``), its suites' revision (its ``label``), its files and its size; and ``settings``,
    the backend's outcome-changing settings the run's environment sets
    (:meth:`backends.base.Backend.settings`; "" for its defaults)."""
    files = ",".join(sorted(universe.by_file))
    text = f"{RUNS_VERSION}|{universe.key}|{universe.label}|{files}|{len(universe)}"
    if settings:
        text += f"|{settings}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]
