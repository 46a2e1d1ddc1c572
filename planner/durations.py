"""Runner-seconds: what each variant costs on a runner (setup, call and teardown), the unit of
the budget and of every plan's cost.

:class:`RunnerSeconds` estimates a variant from, in order:

1. ``measured``: its own runner-seconds in our runs (stored results, ground-truth runs'
   ``<run>.durations.json``);
2. ``template-median``: the median of the measured variants of the same test template in the
   same file (a new OpInfo's ``test_backward_compare_cpu`` costs what its siblings cost);
3. ``shipped-template-prior``: the same medians as shipped with the project
   (``planner/data/runner_prior.json``, measured on our full runs, :func:`derive_prior`);
4. ``pytorch-ci-file-prior``: PyTorch's CI seconds of the file (the default job and config of
   its public ``test-times.json``, read when one is at hand: it is PyTorch's data and is not
   shipped) spread over the file's variants, for test files of a PyTorch checkout;
5. ``flat-prior``: the shipped per-test seconds.

:func:`history_for` makes the selector's :class:`~selector.History` from stored results (runs,
failures, flakiness, runner- and device-seconds); :func:`base_run_history` from the cached full
run of a base universe (its outcomes and runner-seconds: what a backend's nightly on the release
it is on knows; never a run of the head).
"""

from __future__ import annotations

import json
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backends import get_backend
from inventory.build import DEFAULT_TEST_TIMES
from inventory.runs import run_key
from selector import Costs, DurationEstimate, History, TestHistory, Universe, Variant, price
from store.caches import cache_dir
from testspecs.outcomes import FAILURES

PRIOR_PATH = Path(__file__).parent / "data" / "runner_prior.json"
PRIOR_VERSION = 1


def eval_runs() -> Path:
    """The host's ground-truth runs: ``RELAY_VAR_DIR/eval/runs`` (what ``relay eval`` writes)."""
    return cache_dir("eval") / "runs"


MEASURED = "measured"
TEMPLATE = "template-median"
SHIPPED_TEMPLATE = "shipped-template-prior"
CI_FILE = "pytorch-ci-file-prior"
FLAT = "flat-prior"


def template_key(v: Variant) -> str:
    """``file::template``: the variants of one test template in one file cost alike."""
    return f"{v.file}::{v.base}"


def ci_file_key(file: str) -> str:
    """PyTorch's test-times names ``test/nn/test_x.py`` as ``nn/test_x``."""
    return file.removeprefix("test/").removesuffix(".py")


@dataclass(frozen=True)
class RunnerPrior:
    """The runner-seconds prior: ours shipped with the project (no ``../shared`` needed), PyTorch's
    per-file CI seconds only when its ``test-times.json`` is at hand."""

    per_test: float = 0.2
    templates: Mapping[str, float] = field(default_factory=dict)
    ci_files: Mapping[str, float] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def load(
        cls, path: Path = PRIOR_PATH, *, test_times: Path | None = DEFAULT_TEST_TIMES
    ) -> RunnerPrior:
        """The shipped prior (ours: the flat value and the template medians of our runs), with
        PyTorch's per-file CI seconds read from ``test_times`` when that file exists."""
        data: dict[str, Any] = {}
        if path.is_file():
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("version") != PRIOR_VERSION:
                raise ValueError(
                    f"{path}: prior version {data.get('version')}, not {PRIOR_VERSION}"
                )
        ci = derive_prior(test_times=test_times)["ci_files"] if test_times is not None else {}
        return cls(
            per_test=float(data.get("per_test", 0.2)),
            templates={str(k): float(v) for k, v in data.get("templates", {}).items()},
            ci_files=ci,
            sources=dict(data.get("sources", {})),
        )


def derive_prior(
    *,
    test_times: Path | None,
    universe: Universe | None = None,
    measured: Mapping[str, float] | None = None,
    job: str = "default",
    config: str = "default",
    measured_from: str = "",
) -> dict[str, Any]:
    """The shipped prior's content: PyTorch's per-file CI seconds for one job and config (from
    its public ``test-times.json``, rounded to 0.1 s) and, when ``measured`` runner-seconds of a
    ``universe`` are given, the median of each test template (rounded to 1 ms). The flat
    per-test value is the median of the measured variants (0.2 s without any)."""
    ci: dict[str, float] = {}
    if test_times is not None and test_times.is_file():
        data = json.loads(test_times.read_text(encoding="utf-8"))
        by_job = data.get(job) or data.get("default") or {}
        table = by_job.get(config) or by_job.get("default") or {}
        ci = {str(k): round(float(v), 1) for k, v in sorted(table.items()) if float(v) > 0}
    templates: dict[str, float] = {}
    per_test = 0.2
    if universe is not None and measured:
        templates = {
            k: round(s, 3) for k, s in sorted(_template_medians(universe, measured).items())
        }
        known = [measured[v.test_id] for v in universe.variants if v.test_id in measured]
        per_test = round(statistics.median(known), 3) if known else per_test
    return {
        "version": PRIOR_VERSION,
        "per_test": per_test,
        "sources": {
            "ci_files": f"PyTorch test-infra test-times.json, job {job!r}, config {config!r}",
            "templates": measured_from or "none measured",
        },
        "templates": templates,
        "ci_files": ci,
    }


def _template_medians(universe: Universe, measured: Mapping[str, float]) -> dict[str, float]:
    groups: dict[str, list[float]] = defaultdict(list)
    for v in universe.variants:
        s = measured.get(v.test_id)
        if s is not None:
            groups[template_key(v)].append(s)
    return {k: statistics.median(xs) for k, xs in groups.items()}


class RunnerSeconds:
    """Runner-seconds of the variants of one universe (a :class:`selector.DurationEstimate`
    that names its source per variant)."""

    source = "runner-estimate"

    def __init__(
        self,
        universe: Universe,
        *,
        measured: Mapping[str, float] | None = None,
        prior: RunnerPrior | None = None,
    ) -> None:
        self.measured = dict(measured or {})
        self.prior = prior if prior is not None else RunnerPrior.load()
        self.templates = _template_medians(universe, self.measured)
        self.per_file = Counter(v.file for v in universe.variants)
        self._answers: dict[str, tuple[float, str]] = {}

    def _answer(self, v: Variant) -> tuple[float, str]:
        got = self._answers.get(v.test_id)
        if got is not None:
            return got
        key = template_key(v)
        ci = self.prior.ci_files.get(ci_file_key(v.file))
        if v.test_id in self.measured:
            got = (self.measured[v.test_id], MEASURED)
        elif key in self.templates:
            got = (self.templates[key], TEMPLATE)
        elif key in self.prior.templates:
            got = (self.prior.templates[key], SHIPPED_TEMPLATE)
        elif ci is not None and v.file.startswith("test/"):
            got = (ci / max(self.per_file.get(v.file, 1), 1), CI_FILE)
        else:
            got = (self.prior.per_test, FLAT)
        self._answers[v.test_id] = got
        return got

    def seconds(self, v: Variant) -> float:
        return self._answer(v)[0]

    def source_of(self, v: Variant) -> str:
        return self._answer(v)[1]


def ground_truth_durations(runs: Path | None = None) -> dict[str, float]:
    """Mean runner-seconds per test over the cached full (baseline) ground-truth runs (``runs``;
    unset: the host's, :func:`eval_runs`)."""
    sums: dict[str, list[float]] = defaultdict(list)
    runs = runs if runs is not None else eval_runs()
    if runs.is_dir():
        for path in sorted(runs.glob("*-baseline.durations.json")):
            for tid, s in json.loads(path.read_text(encoding="utf-8")).items():
                sums[tid].append(float(s))
    return {tid: sum(xs) / len(xs) for tid, xs in sums.items()}


def history_for(
    stats: Iterable[Mapping[str, Any]] = (),
    *,
    extra: History | None = None,
) -> History:
    """The selector's History from stored per-test stats (rows with ``test_id``, ``runs``,
    ``failures``, ``flips``, ``mean_duration_s`` = runner-seconds, ``mean_device_time_us``) and
    ``extra`` (a ``--history`` file); the stored rows win."""
    tests = dict(extra.tests) if extra is not None else {}
    for row in stats:
        device = row.get("mean_device_time_us")
        tests[str(row["test_id"])] = TestHistory(
            seconds=row.get("mean_duration_s"),
            runs=int(row.get("runs") or 0),
            failures=int(row.get("failures") or 0),
            flaky=bool(row.get("flips")),
            device_seconds=device / 1e6 if device else None,
        )
    return History(tests)


def estimator_for(
    universe: Universe,
    *,
    history: History | None = None,
    runs: Path | None = None,
    prior: RunnerPrior | None = None,
) -> RunnerSeconds:
    """The runner-seconds estimate for ``universe``: measured runner-seconds from ``history``
    and the ground-truth runs in ``runs`` (unset: the host's), the shipped prior after them."""
    measured = ground_truth_durations(runs)
    for tid, h in (history.tests if history is not None else {}).items():
        if h.seconds is not None:
            measured[tid] = h.seconds
    return RunnerSeconds(universe, measured=measured, prior=prior)


_DEVICE_ESTIMATES: dict[str, DurationEstimate] = {}


def device_estimate(backend: str) -> DurationEstimate:
    """The backend's device-time hook (simulated device-seconds), one per backend in this
    process: it caches per op and template."""
    if backend not in _DEVICE_ESTIMATES:
        _DEVICE_ESTIMATES[backend] = get_backend(backend).duration_estimate()
    return _DEVICE_ESTIMATES[backend]


def costs_for(
    universe: Universe,
    *,
    backend: str = "spyre",
    history: History | None = None,
    estimator: DurationEstimate | None = None,
    runs: Path | None = None,
) -> Costs:
    """What a decision over ``universe`` prices with (:class:`~selector.Costs`): ``history``;
    runner-seconds from ``estimator``, else :func:`estimator_for` (measured, the ground-truth
    runs in ``runs`` (unset: the host's), the shipped prior); simulated device-seconds from the backend's
    device-time hook. Decisions over the same universe and costs share one pricing."""
    hist = history if history is not None else History()
    runner = (
        estimator if estimator is not None else estimator_for(universe, history=hist, runs=runs)
    )
    return price(universe, history=hist, runner=runner, device=device_estimate(backend))


def base_run_history(universe: Universe, runs: Path | None = None) -> History:
    """One run of history per variant from the cached full run of ``universe`` (the base
    release's, under its own torch; in ``runs``, unset: the host's): failed or not, and its
    runner-seconds. Empty without one."""
    path = (runs if runs is not None else eval_runs()) / f"{run_key(universe)}-baseline.json"
    if not path.is_file():
        return History()
    outcomes = json.loads(path.read_text(encoding="utf-8"))
    timed = path.with_name(path.stem + ".durations.json")
    seconds = json.loads(timed.read_text(encoding="utf-8")) if timed.is_file() else {}
    return History(
        {
            tid: TestHistory(seconds=seconds.get(tid), runs=1, failures=int(outcome in FAILURES))
            for tid, outcome in outcomes.items()
        }
    )


def merged(*histories: History | None) -> History:
    """Later histories win per test."""
    tests: dict[str, TestHistory] = {}
    for h in histories:
        if h is not None:
            tests.update(h.tests)
    return History(tests)
