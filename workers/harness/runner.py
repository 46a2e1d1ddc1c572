"""Run one shard's test ids to completion, whatever the tests do.

The shard runs in child pytest processes (one per test file) that stream one JSON event per test. When the child
dies in the middle of a test (a signal, ``os._exit``) that test is recorded as ``crashed``; when a
test runs past the per-test timeout the child is killed and the test is recorded as ``timeout``.
Either way the tests not yet run continue in a fresh child; tests already finished are neither
lost nor run again.
"""

from __future__ import annotations

import signal
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backends.procs import EventTail
from store.outcomes import Outcome, TestOutcome
from workers.harness.launchers import Child, Launcher


@dataclass
class ShardRun:
    results: list[TestOutcome]
    children: int  # processes used (1 + one per crash or timeout)
    seconds: float


def _file_of(test_id: str) -> str:
    return test_id.split("::", 1)[0]


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def outcome_of(ev: dict[str, Any]) -> TestOutcome:
    """The outcome a ``result`` event of the report plugin carries."""
    return TestOutcome(
        test_id=ev["nodeid"],
        outcome=ev["outcome"],
        duration_s=float(ev.get("duration") or 0.0),
        device_time_us=ev.get("device_us"),
        message=ev.get("message"),
        artifact_path=ev.get("artifact"),
        properties=ev.get("properties") or {},
    )


def finished_in(workdirs: Iterable[Path]) -> list[TestOutcome]:
    """The results earlier runs of a shard left in their event files (a worker killed before
    it stored them), each test once."""
    found: dict[str, TestOutcome] = {}
    for workdir in workdirs:
        for events in sorted(workdir.glob("events-*.jsonl")):
            for ev in EventTail(events).read():
                if ev.get("kind") == "result":
                    found.setdefault(ev["nodeid"], outcome_of(ev))
    return list(found.values())


def unrun(test_id: str, collect_errors: list[dict[str, Any]], log: Path) -> TestOutcome:
    """A test its child finished without running. When pytest reported a collection error (the
    test's module failed to import or collect) the test is an ``error`` whose message is that
    collection error: it could not run, and it gates like any error its spec does not excuse.
    Otherwise (an id the module does not define, a child that never reached collection) it is
    ``not_run`` with the end of the child's log."""
    error = _collect_error_of(test_id, collect_errors)
    if error is not None:
        return TestOutcome(
            test_id,
            Outcome.ERROR,
            message=f"collection failed: {error.get('message') or 'no message'}",
            artifact_path=error.get("artifact"),
        )
    tail = log.read_text(errors="replace")[-1500:] if log.exists() else ""
    return TestOutcome(test_id, Outcome.NOT_RUN, message=f"runner ran nothing: {tail}")


def _nothing_ran(
    remaining: list[str], collect_errors: list[dict[str, Any]], log: Path
) -> list[TestOutcome]:
    """Outcomes for a child that ran none of ``remaining``. pytest runs nothing when one node id
    is not found: only those are reported (the others run in the next child); otherwise every
    id is :func:`unrun`."""
    missing = _not_found(log, remaining) if not collect_errors else []
    if missing:
        return [_missing(test_id) for test_id in missing]
    return [unrun(test_id, collect_errors, log) for test_id in remaining]


def _not_found(log: Path, ids: list[str]) -> list[str]:
    """The ids of ``ids`` that the child's pytest said it could not find (``ERROR: not found:
    <id>``, the test module collected but defines no such test)."""
    text = log.read_text(errors="replace") if log.exists() else ""
    said = {
        line.split("not found:", 1)[1].strip() for line in text.splitlines() if "not found:" in line
    }
    # pytest names an id by its absolute path ("/srv/x/test_a.py::test_b"), the module server as given
    return [t for t in ids if any(n == t or n.endswith("/" + t) for n in said)]


def _missing(test_id: str) -> TestOutcome:
    return TestOutcome(
        test_id,
        Outcome.NOT_RUN,
        message=f"not found: {test_id} (the tests of this environment do not define it)",
    )


def _collect_error_of(test_id: str, errors: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The collection error of the collector nearest ``test_id`` (its class, its module, its
    folder), else the first one (a conftest, for instance: pytest then runs nothing)."""

    def holds(nodeid: str) -> bool:
        return (
            nodeid in ("", ".")
            or test_id == nodeid
            or test_id.startswith((nodeid + "::", nodeid + "/"))
        )

    nearest = [e for e in errors if holds(str(e.get("nodeid") or ""))]
    if nearest:
        return max(nearest, key=lambda e: len(str(e.get("nodeid") or "")))
    return errors[0] if errors else None


def run_shard(
    test_ids: Iterable[str],
    *,
    launcher: Launcher,
    pytest_args: list[str],
    per_test_timeout: float,
    device_time_property: str | None = None,
    workdir: Path | None = None,
    on_result: Callable[[TestOutcome], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    heartbeat: Callable[[], None] | None = None,
    poll_interval: float = 0.05,
) -> ShardRun:
    """Run ``test_ids`` (pytest node ids) and return one outcome per id, in the given order.

    ``pytest_args`` start pytest for the backend (its RunnerConfig); ``device_time_property``
    names the user property in which its plugin records a test's device time. ``on_result`` is
    called as each test finishes (to store results while the shard runs).
    ``heartbeat`` is called about once a second while a child runs; when ``should_stop`` (asked
    as often) turns true the child is killed and the tests not finished are ``not_run``.
    """
    ids = list(dict.fromkeys(test_ids))
    began = time.perf_counter()
    results: dict[str, TestOutcome] = {}
    own_tmp = None
    if workdir is None:
        own_tmp = tempfile.TemporaryDirectory(prefix="relay-shard-")
        workdir = Path(own_tmp.name)
    workdir.mkdir(parents=True, exist_ok=True)
    artifacts = workdir / "artifacts"
    children = 0

    def record(outcome: TestOutcome) -> None:
        if outcome.test_id in results:
            return
        results[outcome.test_id] = outcome
        if on_result is not None:
            on_result(outcome)

    try:
        while True:
            remaining = [t for t in ids if t not in results]
            if not remaining:
                break
            # One test file per child process, as upstream's run_test.py does: device-generic
            # class names can depend on what the process instantiated before.
            first_file = _file_of(remaining[0])
            remaining = [t for t in remaining if _file_of(t) == first_file]
            children += 1
            events = workdir / f"events-{children}.jsonl"
            argsfile = workdir / f"args-{children}.txt"
            argsfile.write_text("\n".join(remaining) + "\n")
            args = _child_args(pytest_args, device_time_property, events, artifacts, argsfile)
            log = workdir / f"child-{children}.log"
            child = launcher.start(args, log=log)
            before = len(results)
            collect_errors: list[dict[str, Any]] = []
            stopped = _supervise(
                child,
                EventTail(events),
                record,
                per_test_timeout,
                poll_interval,
                should_stop or (lambda: False),
                heartbeat or (lambda: None),
                collect_errors,
            )
            if stopped:
                for test_id in ids:
                    record(TestOutcome(test_id, Outcome.NOT_RUN, message="cancelled before it ran"))
                break
            if len(results) == before:  # the child ran nothing it was given
                for outcome in _nothing_ran(remaining, collect_errors, log):
                    record(outcome)
    finally:
        launcher_cleanup = own_tmp
        if launcher_cleanup is not None:
            launcher_cleanup.cleanup()
    return ShardRun([results[t] for t in ids], children, time.perf_counter() - began)


def _child_args(
    pytest_args: list[str],
    device_time_property: str | None,
    events: Path,
    artifacts: Path,
    argsfile: Path,
) -> list[str]:
    """One child's pytest arguments: the backend's, our report plugin writing ``events`` and
    ``artifacts``, and the node ids listed in ``argsfile``."""
    return [
        *pytest_args,
        "-p", "workers.harness.report_plugin",
        "--relay-events", str(events),
        "--relay-artifacts", str(artifacts),
        *(["--relay-device-time", device_time_property] if device_time_property else []),
        f"@{argsfile}",
    ]  # fmt: skip


def _supervise(
    child: Child,
    tail: EventTail,
    record: Callable[[TestOutcome], None],
    per_test_timeout: float,
    poll_interval: float,
    should_stop: Callable[[], bool],
    heartbeat: Callable[[], None],
    collect_errors: list[dict[str, Any]],
) -> bool:
    """Watch one child to its end (the collection errors it reports go to ``collect_errors``);
    True when it was stopped on request."""
    current: str | None = None
    started = 0.0
    last_beat = time.monotonic()

    def consume() -> None:
        nonlocal current, started
        for ev in tail.read():
            if ev["kind"] == "start":
                current, started = ev["nodeid"], time.monotonic()
            elif ev["kind"] == "result":
                record(outcome_of(ev))
                if ev["nodeid"] == current:
                    current = None
            elif ev["kind"] == "collect_error":
                collect_errors.append(ev)

    def lost(outcome: Outcome, message: str) -> None:
        # the child ended (or was killed) during a test: that outcome, unless its result came in
        consume()
        if current is not None:
            duration = time.monotonic() - started
            record(TestOutcome(current, outcome, duration_s=duration, message=message))

    while True:
        consume()
        code = child.poll()
        if code is not None:
            break
        if time.monotonic() - last_beat >= 1.0:
            last_beat = time.monotonic()
            heartbeat()
            if should_stop():
                child.kill()
                consume()
                if current is not None:
                    record(TestOutcome(current, Outcome.NOT_RUN, message="cancelled while it ran"))
                return True
        if current is not None and time.monotonic() - started > per_test_timeout:
            child.kill()
            lost(
                Outcome.TIMEOUT,
                f"test ran past the per-test timeout of {per_test_timeout:g} s; process killed",
            )
            return False
        time.sleep(poll_interval)
    how = _signal_name(code) if code < 0 else f"exit code {code}"
    lost(Outcome.CRASHED, f"the test process died during this test ({how})")
    return False
