"""``relay specs promote``: the bundled spec's modes promoted from full runs of the bundled suites.

With ``--run N`` it first makes N full runs of the bundled universe on this host, under this
environment's device settings (``SPYRE_DEVICE_MODEL``), each kept in parts as it goes so a killed
command started again goes on where it stopped (:mod:`evaluation.runparts`), and promotes from them.
With ``--runs`` (full runs, read by their content (:mod:`evaluation.promoteruns`): stored runs,
``evaluation/data/groundtruth/<torch>-run<N>.json.xz``, with their header and each failure's
stored first line, or ``{test id: outcome}`` as ``relay eval`` caches them in
``RELAY_VAR_DIR/eval/runs``), the baseline summary is written. A failure's class comes from its
stored message; ``--classify`` (the default) runs once more under ``device.yaml`` only the
failing variants that have no stored message (every failure of a plain run) or whose stored
failure is a tolerance one (the runs are made without the device spec, whose fp16 tolerances may
pass them); ``--no-classify`` runs nothing. Two runs of one torch measure its flaky variants
(outcomes that differ), which the summary and the spec's header count per torch, with the
counts over the variants that run under the bundled spec. Without ``--runs``, the committed
summary is used. The failing variants' classes are read by dtype and device as well
as by message (:mod:`evaluation.labels`). Then the promoted spec is rendered from the summary, keeping the
current file's hand-written entries: printed as a diff, or written with ``--write``.
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import typer

from backends.spyre import BASELINE_SUMMARY, PROMOTED_SPEC, SPECS_DIR

MAKE_COMMAND = "make promote-spec"
DEVICE_SPEC = SPECS_DIR / "device.yaml"


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def _read_runs(paths: list[Path]) -> list[Any]:
    from evaluation.promoteruns import read_run_input
    from evaluation.storedruns import StoredRunError

    runs = []
    for p in paths:
        try:
            runs.append(read_run_input(p))
        except StoredRunError as e:
            _fail(str(e))
    return runs


def _codes(variants: list[Any], runs: list[Any]) -> dict[str, str]:
    """One letter per run and variant: "-" for a run that did not cover its file at all."""
    from testspecs.promote import CODES

    covered = [{t.split("::", 1)[0] for t in run.outcomes} for run in runs]
    return {
        v.test_id: "".join(
            CODES.get(run.outcomes[v.test_id], "m")
            if v.test_id in run.outcomes
            else ("m" if v.file in files else "-")
            for run, files in zip(runs, covered, strict=True)
        )
        for v in variants
    }


def _stored_message(test_id: str, runs: list[Any]) -> str | None:
    """The first stored failure line any run has for the variant."""
    return next((r.messages[test_id] for r in runs if test_id in r.messages), None)


def _to_rerun(failing: list[Any], runs: list[Any], facts: dict[str, Any]) -> list[Any]:
    """The failing variants a rerun under the device spec can still tell something of: those it
    generates (the others are unsupported whatever they say) that no run stored a message for,
    or whose stored failure is a tolerance one (the runs are made without the device spec,
    whose fp16 tolerances may pass them)."""
    from testspecs.promote import classify

    out = []
    for v in failing:
        message = _stored_message(v.test_id, runs)
        if facts[v.test_id].generated and (message is None or classify(message)[0] == "precision"):
            out.append(v)
    return out


def _summary_from_runs(paths: list[Path], classify: bool, processes: int) -> dict[str, object]:
    from evaluation.labels import counts_under_spec, device_facts, record_node, relabel
    from evaluation.promoteruns import flaky_by_torch, stored_universe
    from inventory.build import universe_from_inventory
    from testspecs.promote import BAD, Record, summarize

    runs = _read_runs(paths)
    # the variants some run reports; one missing from a run crashed or hung in it
    reported = {t for run in runs for t in run.outcomes}
    universe = stored_universe(runs) or universe_from_inventory()
    variants = [v for v in universe.by_id.values() if v.test_id in reported]
    if not variants:
        _fail("no variant of the current bundled universe is in these runs")
    codes = _codes(variants, runs)
    unknown = sorted(reported - set(codes))
    if unknown:
        typer.echo(
            f"{len(unknown)} test id(s) of the runs are not in the universe: ignored", err=True
        )
    facts = device_facts(variants, spec=DEVICE_SPEC)
    reruns: dict[str, tuple[str, str | None]] = {}
    failing = _to_rerun([v for v in variants if set(codes[v.test_id]) & BAD], runs, facts)
    if classify and failing:
        typer.echo(
            f"running the {len(failing)} failing variant(s) {DEVICE_SPEC.name} generates without "
            f"a stored message or with a tolerance failure once more under it",
            err=True,
        )
        reruns = _rerun(failing, processes)
    records = [
        Record(
            file=record_node(v)[0],
            name=record_node(v)[1],
            op=v.op,
            module=v.module,
            dtype=v.dtype,
            outcomes=codes[v.test_id],
            message=reruns[v.test_id][1]
            if v.test_id in reruns
            else _stored_message(v.test_id, runs),
            rerun=reruns[v.test_id][0] if v.test_id in reruns else None,
        )
        for v in variants
    ]
    summary = summarize(
        records, runs=[_shown(r.path) for r in runs], universe=universe.label, rerun=_how(reruns)
    )
    # the xfail reasons by dtype and device too, not by the message alone (evaluation.labels)
    by_record = {r: facts[v.test_id] for v, r in zip(variants, records, strict=True)}
    summary = relabel(summary, records, by_record)
    summary["sources"] = [r.describe(_shown(r.path)) for r in runs]
    summary["flaky"] = flaky_by_torch(runs, codes)
    n, under = counts_under_spec(summary, variants, facts)
    summary["under_spec"] = {"variants": n, "counts": under}
    return summary


def _how(reruns: dict[str, tuple[str, str | None]]) -> str | None:
    if not reruns:
        return None
    return f"{len(reruns)} failing variants run once more under {DEVICE_SPEC.name}'s tolerances"


def _shown(path: Path) -> str:
    """A run's path as the committed summary names it: relative to this folder when under it
    (``var/eval/runs/...``), so no host's absolute path is committed."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def _rerun(variants: list[Any], processes: int) -> dict[str, tuple[str, str | None]]:
    """Each variant's outcome code and failure message, run once more on the device under the
    device spec's tolerances, every conformance test mandatory (so a failure reads as one); the
    variants of each file are split over ``processes`` pytest runs side by side."""
    from concurrent.futures import ThreadPoolExecutor

    from backends import get_backend
    from backends.base import PROJECT_ROOT, fresh_pytest
    from testspecs.promote import CODES

    be = get_backend("spyre")
    by_file: dict[str, list[Any]] = defaultdict(list)
    for v in variants:
        by_file[v.via or v.file].append(v)
    parts = []
    for file, group in sorted(by_file.items()):
        size = -(-len(group) // max(processes, 1))
        parts += [(file, group[i : i + size]) for i in range(0, len(group), size)]
    with tempfile.TemporaryDirectory(prefix="relay-promote-") as tmp:
        spec = Path(tmp) / "device.yaml"
        text = DEVICE_SPEC.read_text(encoding="utf-8")
        spec.write_text(
            text.replace("unlisted_test_mode: xfail", "unlisted_test_mode: mandatory_success")
        )

        def run(index: int) -> dict[str, tuple[str, str | None]]:
            file, group = parts[index]
            ids, result = Path(tmp) / f"ids-{index}.txt", Path(tmp) / f"messages-{index}.json"
            ids.write_text("\n".join(v.node_id for v in group) + "\n", encoding="utf-8")
            args = be.pytest_args(
                plugins=["testspecs.messages_plugin"],
                options=["--messages-out", str(result), "--messages-only", str(ids)],
                specs=[spec],
                rootdir=PROJECT_ROOT,
                targets=[file],
            )
            env = {**os.environ, **be.env, **be.run_env}
            subprocess.run(
                fresh_pytest(args), cwd=PROJECT_ROOT, env=env, capture_output=True, timeout=7200
            )
            seen = json.loads(result.read_text(encoding="utf-8")) if result.is_file() else {}
            return {
                v.test_id: (CODES.get(outcome, "m"), message)
                for v in group
                for outcome, message in [seen.get(v.node_id, ["missing", None])]
            }

        out: dict[str, tuple[str, str | None]] = {}
        with ThreadPoolExecutor(max_workers=max(processes, 1)) as pool:
            for found in pool.map(run, range(len(parts))):
                out.update(found)
    return out


def full_runs(count: int, processes: int) -> list[Path]:
    """Runs 1..``count`` of the bundled universe, made here where not cached (run 1 where ``relay
    eval`` keeps the baseline, run n in ``eval/run<n>``, as the release's runs are kept)."""
    from cli.progress import ProgressBar
    from evaluation.groundtruth import eval_dir, run_outcomes, run_path
    from inventory.build import universe_from_inventory

    universe = universe_from_inventory()
    paths = []
    with ProgressBar(f"full runs of the bundled universe ({universe.label})") as bar:
        for n in range(1, count + 1):
            cache = eval_dir() if n == 1 else eval_dir() / f"run{n}"
            run_outcomes(
                universe,
                mutant=None,
                processes=processes,
                cache_dir=cache,
                log=typer.echo,
                progress=bar.update,
                label=f"run {n}",
            )
            paths.append(run_path(universe, None, None, cache))
    return paths


def _under_spec(data: dict[str, Any]) -> str:
    """The promoted counts over the variants that run under the bundled spec (``device.yaml``
    does not skip them), when the summary is of this host's bundled universe."""
    from backends.base import torch_build
    from evaluation.labels import counts_under_spec, device_facts
    from inventory.build import universe_from_inventory
    from inventory.sources import BundledSuites

    if isinstance(data.get("under_spec"), dict):  # counted when the summary was made
        under, n = data["under_spec"]["counts"], data["under_spec"]["variants"]
        shown = ", ".join(f"{k} {v}" for k, v in under.items())
        return f"under the bundled spec ({n:,} of {data['variants']:,} variants run): {shown}"
    # the installed universe's label, known before collecting it (a summary of another one
    # is not collected for)
    label = f"{BundledSuites().revision()} ({torch_build()})"
    if data.get("universe") != label:
        return (
            f"under the bundled spec: not counted (the summary is of {data.get('universe')}, "
            f"this host's universe is {label})"
        )
    universe = universe_from_inventory()
    variants = list(universe.by_id.values())
    n, under = counts_under_spec(data, variants, device_facts(variants, spec=DEVICE_SPEC))
    shown = ", ".join(f"{k} {v}" for k, v in under.items())
    return f"under the bundled spec ({n:,} of {len(variants):,} variants run): {shown}"


def promote(
    runs: list[Path] = typer.Option(
        [],
        "--runs",
        help="full runs: stored runs (evaluation/data/groundtruth/*-run<N>.json.xz) or "
        "{test id: outcome} JSON (RELAY_VAR_DIR/eval/runs/*-baseline.json)",
    ),
    run: int = typer.Option(
        0,
        "--run",
        min=0,
        help="make this many full runs here first (resumable) and promote from them",
    ),
    summary: Path = typer.Option(
        BASELINE_SUMMARY, "--summary", help="the baseline summary (written when --runs is given)"
    ),
    spec: Path = typer.Option(PROMOTED_SPEC, "--spec", help="the promoted spec file"),
    classify: bool = typer.Option(
        True,
        "--classify/--no-classify",
        help="rerun the failing variants without a stored message, or with a stored tolerance "
        "failure, under device.yaml",
    ),
    write: bool = typer.Option(False, "--write", help="write the spec (default: print a diff)"),
    processes: int = typer.Option(2, help="pytest runs side by side (the full runs, the rerun)"),
) -> None:
    """Promote the spec from run evidence: passed -> mandatory_success, failed -> xfail with the
    failure's class, crashed -> skip, flaky -> xfail tagged flaky; hand-written entries win."""
    from testspecs.errors import SpecError
    from testspecs.loader import load_file
    from testspecs.promote import PromoteError, check_renders, counts, load_summary, render

    if run:
        runs = [*full_runs(run, processes), *runs]
    if runs:
        data = _summary_from_runs(runs, classify, processes)
        summary.parent.mkdir(parents=True, exist_ok=True)
        summary.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        typer.echo(f"wrote {summary}", err=True)
    try:
        data = load_summary(summary.read_text(encoding="utf-8"), str(summary))
        existing = load_file(spec).document if spec.is_file() else None
        text = render(data, existing=existing, command=MAKE_COMMAND)
        check_renders(text, str(spec))
    except OSError as e:
        _fail(f"{summary}: {e.strerror}")
        return
    except (PromoteError, SpecError) as e:
        _fail(str(e).splitlines()[0])
        return
    old = spec.read_text(encoding="utf-8") if spec.is_file() else ""
    typer.echo("promoted: " + ", ".join(f"{k} {v}" for k, v in counts(data).items()), err=True)
    typer.echo(_under_spec(data), err=True)
    if write:
        if text != old:
            spec.write_text(text, encoding="utf-8")
        typer.echo(f"{'wrote' if text != old else 'unchanged'} {spec}", err=True)
        return
    diff = difflib.unified_diff(
        old.splitlines(keepends=True), text.splitlines(keepends=True), str(spec), str(spec)
    )
    sys.stdout.writelines(diff)
