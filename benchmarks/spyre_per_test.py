"""What a test costs on the simulated device against the same test on the CPU, per bundled
suite and for an upstream-style unary ufunc test (used by ``bench_spyre``).

The same device-generic tests run twice in one pytest process each: instantiated for spyre
(with the backend's plugins and specs, as the runner runs them) and for the CPU. A sample of
BENCH_SPYRE_TESTS_PER_SUITE (default 30) runnable variants per conformance suite, drawn with a
fixed seed, and every test of ``benchmarks/suites/unary_ufunc_style.py``. Per-test cost is the
mean of pytest's setup + call + teardown times (JUnit XML) over the tests both runs ran, so
neither interpreter start nor collection is in it.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path
from typing import Any

from backends import get_backend
from backends.base import PROJECT_ROOT, fresh_pytest
from benchmarks.report import Report

PER_SUITE = int(os.environ.get("BENCH_SPYRE_TESTS_PER_SUITE", "30"))
ROUNDS = max(1, int(os.environ.get("BENCH_SPYRE_PER_TEST_ROUNDS", "3")))
UNARY = "benchmarks/suites/unary_ufunc_style.py"
SELECT = ["-p", "benchmarks.suites.select_plugin"]


def _neutral(nodeid: str) -> str:
    """One key for a test's spyre and CPU variants."""
    path, _, rest = nodeid.partition("::")
    rest = re.sub(r"(PRIVATEUSE1|CPU)(?=::)", "DEV", rest)
    rest = re.sub(r"_(spyre|cpu)(?=_|$)", "_dev", rest)
    return f"{path}::{rest}"


def _cpu_id(nodeid: str) -> str:
    path, _, rest = nodeid.partition("::")
    rest = re.sub(r"PRIVATEUSE1(?=::)", "CPU", rest)
    rest = re.sub(r"_spyre(?=_|$)", "_cpu", rest)
    return f"{path}::{rest}"


def _run(
    ids: list[str],
    files: list[str],
    args: list[str],
    env: dict[str, str],
    tmp: Path,
    name: str,
    cpu: dict[str, float] | None = None,
) -> dict[str, float]:
    """{neutral id: seconds} of the tests pytest ran (not skipped); ``cpu`` gets their CPU
    seconds (the process's, for the same setup + call + teardown)."""
    listing = tmp / f"{name}.ids"
    listing.write_text("\n".join(ids) + "\n")
    junit = tmp / f"{name}.xml"
    cpu_times = tmp / f"{name}.cpu.json"
    junit.unlink(missing_ok=True)  # a round that fails to write them must not read the last's
    cpu_times.unlink(missing_ok=True)
    subprocess.run(
        fresh_pytest([*args, *SELECT, f"--junitxml={junit}", *files]),
        cwd=PROJECT_ROOT,
        env={
            **env,
            "BENCH_SELECT_IDS": str(listing),
            "PYTHONPATH": str(PROJECT_ROOT),
            "OMP_NUM_THREADS": "1",
            "BENCH_CPU_TIMES": str(cpu_times),
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=3600,
        check=False,
    )
    if cpu is not None and cpu_times.exists():
        cpu.update({_neutral(k): v for k, v in json.loads(cpu_times.read_text()).items()})
    out: dict[str, float] = {}
    if not junit.exists():
        return out
    for case in ET.parse(junit).getroot().iter("testcase"):
        if case.find("skipped") is not None:
            continue
        module = (case.get("classname") or "").rsplit(".", 1)
        if len(module) != 2:
            continue
        nodeid = f"{module[0].replace('.', '/')}.py::{module[1]}::{case.get('name')}"
        out[_neutral(nodeid)] = float(case.get("time") or 0.0)
    return out


def _fastest(wall: dict[str, float], cpu: dict[str, float], *args: Any) -> None:
    """One round of one side (``_run``'s arguments); keeps each test's fastest round."""
    round_cpu: dict[str, float] = {}
    for k, v in _run(*args, cpu=round_cpu).items():
        wall[k] = min(v, wall.get(k, v))
    for k, v in round_cpu.items():
        cpu[k] = min(v, cpu.get(k, v))


def run(report: Report) -> None:
    from inventory.build import universe_from_inventory

    spyre = get_backend("spyre")
    runner = spyre.runner_config(spyre.default_specs)
    universe = universe_from_inventory(backend="spyre", specs=spyre.default_specs)
    by_suite: dict[str, list[str]] = defaultdict(list)
    for v in universe.variants:
        if v.decision != "skip" and not v.via:
            by_suite[v.node_id.split("::", 1)[0]].append(v.node_id)
    rng = random.Random(1234)
    chosen = {
        s: sorted(rng.sample(sorted(ids), min(PER_SUITE, len(ids))))
        for s, ids in sorted(by_suite.items())
    }
    spyre_ids = [t for ids in chosen.values() for t in ids] + [UNARY]
    cpu_ids = [_cpu_id(t) for ids in chosen.values() for t in ids] + [UNARY]
    files = [*chosen, UNARY]
    cpu_env = {**os.environ, "PYTORCH_TESTING_DEVICE_ONLY_FOR": "cpu"}
    cpu_args = ["-q", "-p", "no:cacheprovider", "-p", "no:warnings", "--rootdir", str(PROJECT_ROOT)]
    dev: dict[str, float] = {}
    host: dict[str, float] = {}
    dev_cpu: dict[str, float] = {}
    host_cpu: dict[str, float] = {}
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for r in range(ROUNDS):
            sides = [
                lambda: _fastest(
                    dev,
                    dev_cpu,
                    spyre_ids,
                    files,
                    runner.pytest_args,
                    {**os.environ, **runner.env},
                    tmp,
                    "spyre",
                ),
                lambda: _fastest(host, host_cpu, cpu_ids, files, cpu_args, cpu_env, tmp, "cpu"),
            ]
            for side in sides if r % 2 == 0 else sides[::-1]:
                side()
    table = report.table(
        "Per-test cost on the spyre device against the same test on the CPU",
        [
            "suite",
            "tests",
            "cpu ms/test",
            "spyre ms/test",
            "spyre / cpu",
            "cpu CPU-ms/test",
            "spyre CPU-ms/test",
            "spyre / cpu (CPU time)",
        ],
        note=f"{PER_SUITE} runnable variants per bundled suite (fixed seed) and every test of "
        f"{UNARY} (an upstream-style reference-numerics test, our own), each run in one pytest "
        "process instantiated for spyre (plugins and specs as the runner runs them) and for the "
        "CPU; mean setup + call + teardown of the tests both runs ran (no start-up, no "
        "collection). The device runs on the host here: the ratio is the simulator's and "
        "dispatch's cost. The CPU-time columns count the process's CPU seconds for the same "
        "phases: on a shared machine a wall time includes waiting for a core, CPU time does not. "
        f"Each side ran {ROUNDS} times, alternating; a test's time is its fastest round (wall and "
        "CPU time alike): other jobs on the machine only add to a round. "
        "Goals: <= 1.5x per suite, <= 60 ms per unary ufunc test on spyre. "
        f"Load average (1 min) before: {load_before:.1f}, when done: {os.getloadavg()[0]:.1f} "
        f"on {os.cpu_count()} cores (shared).",
    )
    for suite in [*chosen, UNARY]:
        keys = [k for k in dev if k.startswith(suite + "::") and k in host]
        if not keys:
            table.rows.append([suite, "0", "-", "-", "-", "-", "-", "-"])
            continue
        c = sum(host[k] for k in keys) / len(keys) * 1000
        s = sum(dev[k] for k in keys) / len(keys) * 1000
        row = [suite, str(len(keys)), f"{c:.1f}", f"{s:.1f}", f"{s / c:.2f}x"]
        timed = [k for k in keys if k in dev_cpu and k in host_cpu]
        if timed:
            cc = sum(host_cpu[k] for k in timed) / len(timed) * 1000
            sc = sum(dev_cpu[k] for k in timed) / len(timed) * 1000
            row += [f"{cc:.1f}", f"{sc:.1f}", f"{sc / cc:.2f}x" if cc else "-"]
        else:
            row += ["-", "-", "-"]
        table.rows.append(row)
