"""`relay tests`: list and count the test inventory (bundled suites or a PyTorch checkout)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import typer

from backends import BackendError, get_backend
from cli.progress import ProgressBar
from inventory.build import DEFAULT_TEST_TIMES, Inventory, build_inventory
from inventory.sources import BundledSuites, CheckoutTests, InventoryError

app = typer.Typer(help="The test inventory: every collectable variant with its spec decision.")

_SUITE = typer.Option(
    [], "--suite", "-s", help="bundled suite name (or checkout test file stem); repeatable"
)
_BACKEND = typer.Option("spyre", help="backend to collect for: an installed one (spyre, cpu, ...)")
_UPSTREAM = typer.Option(
    None,
    envvar="RELAY_UPSTREAM_PATH",
    help="a PyTorch checkout: collect its test files instead of the bundled suites",
)
_FILES = typer.Option(
    [], "--file", "-f", help="checkout test file, relative to its root (test/test_ops.py)"
)
_SPECS = typer.Option(
    [], "--specs", help="spec file or folder; repeatable (default: the backend's own specs)"
)
_NO_SPECS = typer.Option(False, "--no-specs", help="no spec decisions")
_HISTORY = typer.Option(None, help="our durations: JSON {test id: seconds}")
_TIMES = typer.Option(
    DEFAULT_TEST_TIMES,
    help="PyTorch's public test-times.json (per-file prior; optional; the folder is RELAY_CI_STATS)",
)
_CACHE = typer.Option(
    None, help="inventory cache folder [default: RELAY_VAR_DIR/inventory, this host's]"
)
_REFRESH = typer.Option(False, "--refresh", help="ignore the cache and collect again")


def _inventory(
    suites: list[str],
    backend: str,
    upstream: Path | None,
    files: list[str],
    specs: list[Path],
    no_specs: bool,
    history: Path | None,
    test_times: Path,
    cache_dir: Path | None,
    refresh: bool,
) -> Inventory:
    try:
        if no_specs:
            specs = []
        elif not specs:
            specs = list(get_backend(backend).default_specs)
        if upstream is not None:
            source: BundledSuites | CheckoutTests = CheckoutTests(upstream, tuple(files))
        else:
            if files:
                raise InventoryError("--file needs --upstream (a PyTorch checkout)")
            BundledSuites(tuple(suites)).files()  # unknown suite names fail here
            # --suite filters the full inventory: one cache entry serves every suite selection
            source = BundledSuites()
        with ProgressBar("collecting the test files", unit="files") as bar:
            return build_inventory(
                source,
                backend=backend,
                specs=specs,
                history=history,
                test_times=test_times,
                cache_dir=cache_dir,
                refresh=refresh,
                progress=bar.update,
            )
    except (InventoryError, BackendError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc


def _header(inv: Inventory) -> str:
    k = inv.key
    origin = "from cache" if inv.cached else f"collected in {inv.collect_seconds:.1f} s"
    return (
        f"# backend {inv.backend}; revision {k.revision}; torch {k.torch_build}; "
        f"specs {k.specs_hash}; backend version {k.backend_version} ({origin})"
    )


@app.command("list")
def list_tests(
    suite: list[str] = _SUITE,
    backend: str = _BACKEND,
    upstream: Path | None = _UPSTREAM,
    file: list[str] = _FILES,
    specs: list[Path] = _SPECS,
    no_specs: bool = _NO_SPECS,
    history: Path | None = _HISTORY,
    test_times: Path = _TIMES,
    cache_dir: Path | None = _CACHE,
    refresh: bool = _REFRESH,
    as_json: bool = typer.Option(False, "--json", help="one JSON object per variant"),
    opcases: list[Path] = typer.Option(
        [],
        "--opcases",
        help="list the op-level tests of these model op-test spec files instead (run them "
        "with `pytest -p testspecs.opcases FILE`); repeatable",
    ),
) -> None:
    """Every collectable variant: test id, op/module, dtype, spec decision, duration."""
    if opcases:
        _list_opcases(opcases, as_json)
        return
    inv = _inventory(
        suite, backend, upstream, file, specs, no_specs, history, test_times, cache_dir, refresh
    )
    rows = inv.select(suites=suite)
    if as_json:
        for v in rows:
            typer.echo(json.dumps(asdict(v), sort_keys=True))
        return
    typer.echo(_header(inv))
    for v in rows:
        target = v.op or v.module or "-"
        duration = f"{v.duration:.3f}s" if v.duration is not None else "-"
        typer.echo(
            f"{v.test_id}\t{target}\t{v.dtype or '-'}\t{v.decision or 'no-spec'}\t{duration}"
        )
    for error in inv.errors:
        typer.echo(f"collection error: {error['error']}", err=True)


def _list_opcases(paths: list[Path], as_json: bool) -> None:
    """The op-level tests of torch-spyre model op-test files, as pytest names them."""
    from testspecs.errors import SpecError
    from testspecs.loader import load_file
    from testspecs.opcases import op_tests

    for path in paths:
        try:
            spec = load_file(path)
        except (SpecError, OSError) as exc:
            typer.echo(f"error: {path}: {str(exc).splitlines()[0]}", err=True)
            raise typer.Exit(2) from None
        for t in op_tests(spec.document):
            row: dict[str, object] = {"test_id": f"{path}::{t.name}", "op": t.item.name}
            row |= {"dtype": t.dtype}
            row |= {"decision": t.mode, "tags": list(t.tags)}
            if as_json:
                typer.echo(json.dumps(row, sort_keys=True))
            else:
                typer.echo(f"{row['test_id']}\t{t.item.name}\t{t.dtype or '-'}\t{t.mode}\t-")


def _table(title: str, counts: list[tuple[str, int]], total: int) -> list[str]:
    lines = [f"\n{title}"]
    width = max((len(k) for k, _ in counts), default=4)
    for name, n in counts:
        lines.append(f"  {name:<{width}}  {n:>7}  {100 * n / max(total, 1):5.1f} %")
    return lines


@app.command("count")
def count_tests(
    suite: list[str] = _SUITE,
    backend: str = _BACKEND,
    upstream: Path | None = _UPSTREAM,
    file: list[str] = _FILES,
    specs: list[Path] = _SPECS,
    no_specs: bool = _NO_SPECS,
    history: Path | None = _HISTORY,
    test_times: Path = _TIMES,
    cache_dir: Path | None = _CACHE,
    refresh: bool = _REFRESH,
    top: int = typer.Option(25, help="ops/modules to show (0 = all)"),
    as_json: bool = typer.Option(False, "--json", help="the breakdown as one JSON object"),
) -> None:
    """How many variants, broken down by suite, decision, dtype and op/module."""
    inv = _inventory(
        suite, backend, upstream, file, specs, no_specs, history, test_times, cache_dir, refresh
    )
    rows = inv.select(suites=suite)
    by_target = inv.count_by("op", [v for v in rows if v.op]) + inv.count_by(
        "module", [v for v in rows if v.module]
    )
    by_suite = dict(inv.count_by("suite", rows).most_common())
    by_decision = dict(inv.count_by("decision", rows).most_common())
    by_dtype = dict(inv.count_by("dtype", rows).most_common())
    breakdown: dict[str, object] = {
        "total": len(rows),
        "backend": inv.backend,
        "key": asdict(inv.key),
        "cached": inv.cached,
        "collection_errors": len(inv.errors),
        "by_suite": by_suite,
        "by_decision": by_decision,
        "by_dtype": by_dtype,
        "by_op": dict(by_target.most_common()),
        "without_op_or_module": sum(1 for v in rows if not v.op and not v.module),
        "restricted": inv.restricted,
    }
    if as_json:
        typer.echo(json.dumps(breakdown, indent=2, sort_keys=True))
        return
    total = len(rows)
    lines = [_header(inv), f"{total} {inv.backend} variants"]
    lines += _table("by suite", list(by_suite.items()), total)
    lines += _table("by spec decision", list(by_decision.items()), total)
    lines += _table("by dtype", list(by_dtype.items()), total)
    ops = by_target.most_common(top or None)
    title = f"by op / module ({len(by_target)} in all" + (f", top {top})" if top else ")")
    lines += _table(title, ops, total)
    if inv.errors:
        lines.append(f"\n{len(inv.errors)} collection error(s): see `relay tests list`")
    for r in inv.restricted:
        lines.append(
            f"\nnot collectable: {r['file']}::{r['cls']} ({r['tests']} tests) is restricted "
            f"with only_for={r['only_for']}; it needs a wrapper module"
        )
    typer.echo("\n".join(lines))
