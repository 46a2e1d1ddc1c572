"""``relay specs``: validate, lint, new, update, explain, schema."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import typer

from backends import BackendError
from backends.spyre import SPECS_DIR
from cli.specs_promote import promote

if TYPE_CHECKING:
    from testspecs.collect import Collector

app = typer.Typer(
    help="YAML test specs (torch-spyre test_suite_config compatible).", no_args_is_help=True
)

BUNDLED = SPECS_DIR  # the bundled backend's own spec
app.command()(promote)


def _out(text: str) -> None:
    sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")


@app.command()
def validate(paths: list[Path] = typer.Argument(..., help="spec files or folders")) -> None:
    """Validate spec files; print every problem with file:line:column; exit 1 on errors."""
    from testspecs.errors import SpecError
    from testspecs.loader import load_files, spec_files

    files = spec_files(paths)
    if not files:
        _out("no spec files found")
        raise typer.Exit(1)
    try:
        loaded = load_files(files)
    except SpecError as e:
        _out("\n".join(e.messages))
        _out(f"{len(e.issues)} error(s) in {len({i.loc.file for i in e.issues})} file(s)")
        raise typer.Exit(1) from None
    for s in loaded:
        for w in s.warnings:
            _out(str(w))
    _out(f"{len(loaded)} spec file(s) valid")


def pytest_collector(backend_name: str) -> Collector:
    """What pytest collects from one test file for ``backend_name``'s device: the backend's own
    collection command in a subprocess (as the inventory collects), so tests a module generates
    at import time count."""
    from backends import get_backend
    from backends.base import fresh_pytest
    from testspecs.collect import CollectedVariant, CollectionError, generic_class

    backend = get_backend(backend_name)
    suffixes = ("PRIVATEUSE1", backend.name.upper())

    def collect(path: Path) -> list[CollectedVariant]:
        root = path.resolve().parent
        with tempfile.TemporaryDirectory(prefix="relay-lint-") as tmp:
            out = Path(tmp) / "variants.jsonl"
            args = backend.pytest_args(
                plugins=["inventory.collect_plugin"],
                options=["--collect-only", "--inventory-out", str(out)],
                rootdir=root,
                targets=[str(path.resolve())],
            )
            env = {**os.environ, **backend.env}
            proc = subprocess.run(
                fresh_pytest(args), cwd=root, env=env, capture_output=True, text=True, timeout=900
            )
            written = out.exists()
            rows = [json.loads(x) for x in out.read_text().splitlines()] if written else []
        errors = [r for r in rows if "error" in r]
        if proc.returncode not in (0, 5) or errors or not written:
            text = (errors[0]["message"] if errors else proc.stdout + proc.stderr).strip()
            last = text.splitlines()[-1] if text else f"pytest exited {proc.returncode}"
            raise CollectionError(f"pytest could not collect {path.name}: {last}")
        return [
            CollectedVariant(
                test_id=r["test_id"],
                cls=generic_class(r["cls"], suffixes),
                method=_base_name(r, backend.name),
                op=r.get("op"),
                dtype=r.get("dtype"),
                module=r.get("module"),
            )
            for r in rows
            # device-generic variants only: a TestCase upstream never instantiates for a device
            # (a mixin) is collected as a plain unittest class
            if r.get("cls") and generic_class(r["cls"], suffixes) != r["cls"]
        ]

    return collect


def _base_name(record: dict[str, str], device: str) -> str:
    """The template's name; for a test generated under another function name (``setattr(cls,
    "test___add___not_implemented", test)``) the variant's name without device and dtype."""
    from testspecs.compiled import norm_op
    from testspecs.names import parse_variant

    base, op = record["base"], record.get("op")
    prefix = parse_variant(record["name"], device).prefix
    prefix = prefix.removesuffix("_" + norm_op(op)) if op else prefix
    if base == prefix or (prefix.startswith(base + "_") and record.get("module")):
        return base
    return prefix


@app.command()
def lint(
    paths: list[Path] = typer.Argument(..., help="spec files or folders"),
    tests_root: Path | None = typer.Option(None, help="the ${TORCH_ROOT} to check names against"),
    device_root: Path | None = typer.Option(None, help="the ${TORCH_DEVICE_ROOT}"),
    backend: str = typer.Option("spyre", help="the device whose collection the names must match"),
    static: bool = typer.Option(
        False, "--static", help="read test files' source instead of collecting them with pytest"
    ),
) -> None:
    """Duplicates, dead patterns, uncovered tests, expired xfails, variant names; warnings for
    names that never run on the device (restricted classes, dtypes the spec removes)."""
    from testspecs.lint import lint as run_lint

    collector = None if static or not (tests_root or device_root) else pytest_collector(backend)
    findings = run_lint(
        list(paths), tests_root=tests_root, device_root=device_root, collector=collector
    )
    for f in findings:
        _out(str(f))
    warnings = sum(1 for f in findings if f.severity == "warning")
    _out(f"{len(findings)} finding(s)" + (f" ({warnings} warning(s))" if warnings else ""))
    if len(findings) > warnings:
        raise typer.Exit(1)


@app.command()
def new(
    test_file: Path = typer.Argument(..., help="an upstream test file"),
    tests_root: Path | None = typer.Option(
        None, help="the ${TORCH_ROOT} (an upstream checkout) the spec path is relative to"
    ),
    device_root: Path | None = typer.Option(
        None, help="the ${TORCH_DEVICE_ROOT} (a backend's repository) the spec path is relative to"
    ),
) -> None:
    """Print a skeleton spec listing the file's device-generic tests.

    Without a root: a file under a `test` folder is upstream's (${TORCH_ROOT} is the folder
    above it), any other one a backend's own (${TORCH_DEVICE_ROOT} is the current folder, or
    the file's own when it lies outside). The second line is the `relay specs lint` command that
    checks the spec against the same file."""
    from testspecs.authoring import new_skeleton

    if not test_file.exists():
        _fail(f"{test_file}: no such file")
    if not test_file.is_file():
        _fail(f"{test_file}: not a file")
    if tests_root is None and device_root is None:
        tests_root, device_root = _roots_of(test_file.resolve())
    for given in (r for r in (device_root, tests_root) if r is not None):
        if not test_file.resolve().is_relative_to(given.resolve()):
            _fail(f"{test_file}: not under {given}")
    try:
        text = new_skeleton(test_file, tests_root=tests_root, device_root=device_root)
    except (SyntaxError, UnicodeDecodeError, ValueError) as exc:
        _fail(f"{test_file}: not a Python test file ({str(exc).splitlines()[0]})")
    flag, root = ("--device-root", device_root) if device_root else ("--tests-root", tests_root)
    check = f"# Check: relay specs lint SPEC {flag} {Path(root or '.').resolve()}"
    head, _, rest = text.partition("\n")
    _out(f"{head}\n{check}\n{rest}")


def _roots_of(test_file: Path) -> tuple[Path | None, Path | None]:
    """(tests_root, device_root) for a file ``specs new`` was given without one."""
    for parent in test_file.parents:
        if parent.name == "test":
            return parent.parent, None
    cwd = Path.cwd().resolve()
    return None, cwd if test_file.is_relative_to(cwd) else test_file.parent


def _fail(message: str, code: int = 2) -> NoReturn:
    """One line on stderr, then exit ``code``."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


@app.command()
def update(
    from_results: list[Path] = typer.Option(..., "--from-results", help="JSON report(s) of runs"),
    specs: list[Path] = typer.Argument(None, help="spec files or folders (default: bundled)"),
    min_passes: int = typer.Option(
        2, help="runs an xfail must pass in before it is proposed mandatory"
    ),
) -> None:
    """Print proposed mode changes as a unified diff (never applied: review, then `git apply`)."""
    from testspecs.authoring import propose_updates

    diff = propose_updates(list(from_results), list(specs or [BUNDLED]), min_passes=min_passes)
    _out(diff or "no changes proposed")


@app.command()
def explain(
    test_id: str = typer.Argument(
        ...,
        help="e.g. spyre_stack/conformance/test_common.py::TestCommonPRIVATEUSE1::"
        "test_compare_cpu_add_spyre_float16",
    ),
    spec: list[Path] = typer.Option(
        None, "--spec", help="spec files or folders (default: bundled)"
    ),
    tests_root: Path | None = typer.Option(
        None, help="the ${TORCH_ROOT} the id's file is relative to (default: the current folder)"
    ),
    op: str | None = typer.Option(None, help="instead of the op pytest collects"),
    dtype: str | None = typer.Option(None, help="instead of the dtype pytest collects"),
    module: str | None = typer.Option(None, help="instead of the module pytest collects"),
    device: str = typer.Option("spyre", help="the backend whose collection the id is in"),
) -> None:
    """Which entry and rule decide this test, with the op, dtype and module pytest collects for
    it on the device (what the spec plugin sees). An id pytest does not collect is an error."""
    from testspecs.collect import CollectionError
    from testspecs.compiled import CompiledSpec
    from testspecs.errors import SpecError
    from testspecs.loader import load_files
    from testspecs.merge import merge
    from testspecs.resolve import resolve

    file_part, sep, name = test_id.partition("::")
    if not sep or not name:
        _fail(f"{test_id!r} is not a test id (FILE::CLASS::TEST)")
    root = tests_root or Path(".")
    path = root / file_part
    if not path.is_file():
        _fail(
            f"{file_part}: no such test file (ids are relative to {root.resolve()}; "
            "--tests-root sets it)"
        )
    try:
        merged = merge(load_files(list(spec or [BUNDLED])))
    except SpecError as e:
        _out("\n".join(e.messages))
        raise typer.Exit(1) from None
    try:
        collected = pytest_collector(device)(path)
    except (CollectionError, BackendError) as exc:
        _fail(str(exc))
    found = next((v for v in collected if v.test_id.split("::", 1)[-1] == name), None)
    if found is None:
        _fail(
            f"pytest collects no test {name!r} from {file_part} for {device} "
            f"({len(collected)} tests there)",
            code=1,
        )
    decision = resolve(
        CompiledSpec(merged.document, device=device),
        test_id,
        op=op or found.op,
        dtype=dtype or found.dtype,
        module=module or found.module,
        base=f"{found.cls}::{found.method}" if found.cls else found.method,
    )
    _out(decision.explain())


@app.command()
def schema(output: Path | None = typer.Option(None, help="write here instead of stdout")) -> None:
    """Print the JSON Schema of the spec grammar (for editors)."""
    from testspecs.schema import schema_text

    text = schema_text()
    if output:
        output.write_text(text)
    else:
        _out(text)


@app.command()
def wrap(
    test_file: Path = typer.Argument(..., help="an upstream test file"),
    output: Path = typer.Option(Path("."), help="folder for the wrapper module"),
) -> None:
    """Write a wrapper module instantiating classes upstream restricted with only_for."""
    from testspecs.wrapper import restricted_classes, write_wrapper

    classes = restricted_classes(test_file)
    out = write_wrapper(test_file, output, classes)
    _out(f"wrote {out} for {', '.join(classes)}" if out else "no restricted classes")
