"""The full runs ``relay specs promote --runs`` reads, in either shape, told apart by content:

* a **stored run** (:mod:`evaluation.storedruns`: xz-compressed JSON with ``format:
  relay-groundtruth-run``): its header (torch build, suites, date, run number) and its failures'
  stored first lines, which classify them without running anything again;
* a plain ``{test id: outcome}`` JSON run, as ``relay eval`` caches it in
  ``RELAY_VAR_DIR/eval/runs`` (no header, no messages).

Runs of the same torch build measure its flaky variants (:func:`flaky_by_torch`): a variant whose
outcome differs between two of them. A stored universe of the runs' torch beside them
(``<version>-universe.json.xz``) stands in for collecting the installed one (:func:`stored_universe`).
"""

from __future__ import annotations

import json
import lzma
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evaluation.storedruns import FORMAT, RunHeader, StoredRunError, decode
from selector import Universe

XZ_MAGIC = b"\xfd7zXZ\x00"


@dataclass
class RunInput:
    path: Path
    outcomes: dict[str, str]  # test id -> outcome
    header: RunHeader | None = None  # a stored run's header
    messages: dict[str, str] = field(default_factory=dict)  # test id -> failure's first line

    def describe(self, shown: str) -> dict[str, Any]:
        """What the summary (and the spec's header) says of this run."""
        if self.header is None:
            return {"path": shown}
        h = self.header
        return {
            "path": shown,
            "torch_build": h.torch_build,
            "date": h.date,
            "run": h.run,
            "suites": h.suites,
        }


def read_run_input(path: Path) -> RunInput:
    """One run, by its content: xz or plain, stored-run format or ``{test id: outcome}``."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise StoredRunError(f"{path}: cannot read a run: {exc.strerror or exc}") from None
    if raw.startswith(XZ_MAGIC) or path.name.endswith(".xz"):
        try:
            raw = lzma.decompress(raw)
        except lzma.LZMAError as exc:
            raise StoredRunError(f"{path}: not xz-compressed JSON ({exc})") from None
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise StoredRunError(f"{path}: cannot read a run: {exc}") from None
    if isinstance(data, dict) and data.get("format") == FORMAT:
        stored = decode(data, str(path))
        return RunInput(path, stored.outcomes, stored.header, stored.messages)
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise StoredRunError(f"{path}: not a run ({{test id: outcome}} or a stored run)")
    return RunInput(path, data)


def torch_of(run: RunInput) -> str:
    """The torch build a run was made with; plain runs, whose header says nothing, are taken
    for runs of one torch (as their verdicts are: outcomes that differ make a variant flaky)."""
    return run.header.torch_build if run.header else "unknown (plain runs)"


def flaky_by_torch(runs: Sequence[RunInput], ids: Iterable[str]) -> dict[str, dict[str, int]]:
    """Per torch build with two runs or more: the ``ids`` (variants) all its runs report, and how
    many of them have an outcome that differs between its runs."""
    groups: dict[str, list[RunInput]] = defaultdict(list)
    for run in runs:
        groups[torch_of(run)].append(run)
    out = {}
    wanted = list(ids)
    for torch, group in sorted(groups.items()):
        if len(group) < 2:
            continue
        both = [t for t in wanted if all(t in r.outcomes for r in group)]
        differ = sum(1 for t in both if len({r.outcomes[t] for r in group}) > 1)
        out[torch] = {"runs": len(group), "variants": len(both), "flaky": differ}
    return out


def stored_universe(runs: Sequence[RunInput]) -> Universe | None:
    """The universe stored beside the runs, when every run is a stored run of one torch build and
    ``<version>-universe.json.xz`` in the first run's folder was collected under that build."""
    from evaluation.stepinputs import StepInputError, read_universe, universe_file

    builds = {r.header.torch_build if r.header else None for r in runs}
    if len(builds) != 1 or None in builds or runs[0].header is None:
        return None
    path = universe_file(runs[0].header.torch_version, runs[0].path.parent)
    if not path.is_file():
        return None
    try:
        stored = read_universe(path)
    except StepInputError:
        return None
    return stored.universe if stored.header.torch_build in builds else None
