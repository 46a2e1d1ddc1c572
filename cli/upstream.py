"""`relay upstream`: resolve upstream revisions and print the change facts between two."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from upstream import UpstreamError, UpstreamSource, default_cache_dir, open_source
from upstream.changes import ChangeFacts, compute_change_facts, facts_to_json
from upstream.changes.behaviour import Side
from upstream.headenv import HeadEnvError, default_root, ensure_env

app = typer.Typer(
    help="Upstream PyTorch sources (git checkout or released wheels) and what changed.",
    no_args_is_help=True,
    add_completion=False,
)

UpstreamOpt = Annotated[
    Path | None,
    typer.Option(
        "--upstream",
        envvar="RELAY_UPSTREAM_PATH",
        help="A PyTorch git checkout; without it revisions are released wheels.",
    ),
]
CacheOpt = Annotated[
    Path | None,
    typer.Option(
        "--cache-dir",
        envvar="RELAY_UPSTREAM_CACHE",
        help=f"Wheel and change-facts cache [default: {default_cache_dir()}]",
    ),
]
OfflineOpt = Annotated[
    bool,
    typer.Option("--offline", help="Never ask the package index; use cached wheels only."),
]


def _source(upstream: Path | None, cache_dir: Path | None, offline: bool) -> UpstreamSource:
    try:
        return open_source(upstream, cache_dir=cache_dir, offline=offline)
    except UpstreamError as exc:
        _fail(exc)


def _fail(exc: Exception) -> NoReturn:
    typer.echo(f"error: {exc}", err=True)
    raise typer.Exit(2)


@app.command("resolve")
def resolve_cmd(
    revision: Annotated[str, typer.Argument(help="2.13, 2.14.1, v2.13.0, release/2.14, a sha")],
    upstream: UpstreamOpt = None,
    cache_dir: CacheOpt = None,
    offline: OfflineOpt = False,
) -> None:
    """Say exactly which commit or release a revision names."""
    source = _source(upstream, cache_dir, offline)
    try:
        rev = source.resolve(revision)
    except UpstreamError as exc:
        _fail(exc)
    typer.echo(f"{revision} -> {rev.resolved} ({rev.detail})")


@app.command("diff")
def diff_cmd(
    from_rev: Annotated[str, typer.Option("--from", help="Base revision, e.g. 2.13")],
    to_rev: Annotated[str, typer.Option("--to", help="Head revision, e.g. 2.14")],
    upstream: UpstreamOpt = None,
    cache_dir: CacheOpt = None,
    offline: OfflineOpt = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the full facts as JSON.")] = False,
    limit: Annotated[int, typer.Option(help="Names listed per section (0: counts only).")] = 15,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="Recompute, ignore stored facts.")
    ] = False,
) -> None:
    """Change facts between two revisions: files, symbols, native_functions, OpInfo entries."""
    source = _source(upstream, cache_dir, offline)
    facts_cache = None if no_cache else (cache_dir or default_cache_dir())
    try:
        base = source.resolve(from_rev)
        head = source.resolve(to_rev)
        facts = compute_change_facts(source, base, head, cache_dir=facts_cache)
    except UpstreamError as exc:
        _fail(exc)
    if as_json:
        typer.echo(facts_to_json(facts))
        return
    typer.echo(render(facts, limit=limit))


@app.command("env")
def env_cmd(
    torch: Annotated[str, typer.Option("--torch", help="torch release, e.g. 2.14.1")],
    root: Annotated[
        Path | None, typer.Option(help="Folder of the environments [default: RELAY_VAR_DIR/envs].")
    ] = None,
    cache_dir: CacheOpt = None,
    offline: OfflineOpt = False,
    collect: Annotated[
        bool,
        typer.Option(
            "--collect",
            help="Also collect the bundled suites with it and compare with the installed torch.",
        ),
    ] = False,
) -> None:
    """Make (once) a virtual environment with another torch release and the spyre C++ core built
    for it; print its python. Other packages keep this environment's versions."""
    root = root or default_root()
    typer.echo(f"torch {torch} environment under {root}/torch-{torch} ...")
    try:
        env = ensure_env(torch, root=root, wheel_cache=cache_dir, offline=offline)
    except HeadEnvError as exc:
        _fail(exc)
    how = f"created in {env.seconds:.0f} s" if env.created else "reused (marker present)"
    if env.moved_from:
        how = f"reused, re-pointed from {env.moved_from} in {env.seconds:.0f} s"
    typer.echo(f"  {how}: torch build {env.torch_build}")
    typer.echo(f"  C++ core built in {env.extensions_dir} (SPYRE_EXTENSIONS_DIR)")
    typer.echo(f"  log: {env.log}")
    if collect:
        _collect_both(env.python, env.env)
    typer.echo(str(env.python))


@app.command("fingerprints")
def fingerprints_cmd(
    torch: Annotated[
        list[str], typer.Option("--torch", help="torch release, e.g. 2.14.1 (repeat for more)")
    ],
    cache_dir: CacheOpt = None,
    offline: OfflineOpt = False,
    write_seeds: Annotated[
        bool,
        typer.Option(
            "--write-seeds",
            help="Also write them as the project's seeds (upstream/changes/fingerprint_seeds).",
        ),
    ] = False,
) -> None:
    """The behaviour fingerprints of the OpInfo database under each torch (cached; each release
    in its own environment unless it is the installed one). ``--write-seeds`` refreshes the
    shipped seeds after the fingerprint script changed (``make seed-fingerprints``)."""
    from upstream.changes.behaviour import FingerprintError, fingerprints, write_seed

    cache = cache_dir or default_cache_dir()
    try:
        sides = [_side(version, cache, offline) for version in torch]
        results = fingerprints(sides, cache, progress=lambda line: typer.echo(f"  {line}"))
    except (HeadEnvError, FingerprintError) as exc:
        _fail(exc)
    for side, result in zip(sides, results, strict=True):
        typer.echo(f"torch {side.build}: {len(result.get('entries', {}))} OpInfo entries")
        if write_seeds:
            typer.echo(f"  seed: {write_seed(cache, side.build)}")


def _side(version: str, cache: Path, offline: bool) -> Side:
    """The interpreter of ``version``: this one when it has that torch, else its environment."""
    from backends.base import torch_build
    from planner.release import is_installed

    if is_installed(version):
        return Side(python=sys.executable, build=torch_build())
    env = ensure_env(version, wheel_cache=cache, offline=offline)
    return Side(python=str(env.python), build=env.torch_build, env=env.env)


def _collect_both(python: Path, env: dict[str, str]) -> None:
    from backends import BackendError, get_backend
    from inventory.build import build_inventory
    from inventory.sources import BundledSuites, InventoryError

    specs = list(get_backend("spyre").default_specs)
    try:
        head = build_inventory(BundledSuites(), specs=specs, python=python, env=env)
        base = build_inventory(BundledSuites(), specs=specs)
    except (InventoryError, BackendError) as exc:
        _fail(exc)
    for label, inv in (("installed", base), ("this env", head)):
        origin = "from cache" if inv.cached else f"collected in {inv.collect_seconds:.0f} s"
        per_suite = Counter(v.suite for v in inv.variants)
        typer.echo(
            f"  bundled universe, {label} torch {inv.key.torch_build}: {len(inv.variants)} "
            f"variants ({origin}; {len(inv.errors)} collection errors): "
            + ", ".join(f"{k} {n}" for k, n in sorted(per_suite.items()))
        )
    old = {v.test_id for v in base.variants}
    new = {v.test_id for v in head.variants}
    typer.echo(
        f"  only in this env: {len(new - old)}; only with the installed torch: {len(old - new)}"
    )


def _sample(names: list[str], limit: int) -> str:
    if limit <= 0 or not names:
        return ""
    shown = ", ".join(names[:limit])
    more = f", ... (+{len(names) - limit})" if len(names) > limit else ""
    return f"    {shown}{more}"


def render(facts: ChangeFacts, *, limit: int = 15) -> str:
    """The human summary printed by `relay upstream diff`."""
    c = facts.counts()
    lines = [
        f"upstream diff ({facts.source_kind}): {facts.base.requested} -> {facts.head.requested}",
        f"  base: {facts.base.resolved}  ({facts.base.detail})",
        f"  head: {facts.head.resolved}  ({facts.head.detail})",
        "",
        f"files: {c['files']} changed  (+{c['files_added']} -{c['files_removed']} "
        f"~{c['files_modified']})",
    ]
    tops = Counter(f.path.split("/", 1)[0] for f in facts.files)
    lines.append("    by top folder: " + ", ".join(f"{k} {v}" for k, v in tops.most_common(6)))
    py_files = facts.python
    lines.append(
        f"python files: {len(py_files)}  symbols: {c['symbols']} changed  "
        f"(+{c['symbols_added']} -{c['symbols_removed']} ~{c['symbols_modified']})"
    )
    unparsed = [f.path for f in py_files if f.parse_error]
    if unparsed:
        lines.append(f"    not parsable (whole file counts as changed): {len(unparsed)}")
    by_file = sorted(facts.changed_symbols().items(), key=lambda kv: -len(kv[1]))
    lines.append(_sample([f"{p} ({len(s)})" for p, s in by_file], limit))
    lines.append(
        f"native_functions.yaml entries: {c['native_functions']}  (+{c['native_functions_added']} "
        f"-{c['native_functions_removed']} ~{c['native_functions_modified']}); "
        f"derivatives.yaml entries: {c['derivatives']}  (+{c['derivatives_added']} "
        f"-{c['derivatives_removed']} ~{c['derivatives_modified']}); operators: {c['changed_ops']}"
    )
    dispatch_only = [e for e in facts.native_functions if e.fields == ["dispatch"]]
    if dispatch_only:
        keys = Counter(k for e in dispatch_only for k in e.dispatch_keys)
        lines.append(
            f"    dispatch-only changes: {len(dispatch_only)} entries; keys: "
            + ", ".join(f"{k} {n}" for k, n in keys.most_common(6))
        )
    lines.append(_sample(sorted(facts.changed_overloads()), limit))
    lines.append(
        f"OpInfo entries: {c['opinfos']}  (+{c['opinfos_added']} -{c['opinfos_removed']} "
        f"~{c['opinfos_modified']}); ModuleInfo entries: {c['moduleinfos']}  "
        f"(+{c['moduleinfos_added']} -{c['moduleinfos_removed']} ~{c['moduleinfos_modified']})"
    )
    lines.append(_sample(sorted(facts.changed_opinfos() | facts.changed_moduleinfos()), limit))
    if facts.changed_info_classes:
        lines.append(
            "changed Info classes (affect every entry of that class): "
            + ", ".join(facts.changed_info_classes)
        )
    for error in facts.errors:
        lines.append(f"warning: {error}")
    return "\n".join(line for line in lines if line != "")
