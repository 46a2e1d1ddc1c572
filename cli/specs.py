"""``relay specs``: validate, lint, new, update, explain, schema."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from backends.spyre import SPECS_DIR

app = typer.Typer(
    help="YAML test specs (torch-spyre test_suite_config compatible).", no_args_is_help=True
)

BUNDLED = SPECS_DIR  # the bundled backend's own spec


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


@app.command()
def lint(
    paths: list[Path] = typer.Argument(..., help="spec files or folders"),
    tests_root: Path | None = typer.Option(None, help="the ${TORCH_ROOT} to check names against"),
    device_root: Path | None = typer.Option(None, help="the ${TORCH_DEVICE_ROOT}"),
) -> None:
    """Duplicates, dead patterns, uncovered tests, expired xfails, variant names."""
    from testspecs.lint import lint as run_lint

    findings = run_lint(list(paths), tests_root=tests_root, device_root=device_root)
    for f in findings:
        _out(str(f))
    _out(f"{len(findings)} finding(s)")
    if findings:
        raise typer.Exit(1)


@app.command()
def new(
    test_file: Path = typer.Argument(..., help="an upstream test file"),
    tests_root: Path | None = typer.Option(None, help="root the spec path is relative to"),
) -> None:
    """Print a skeleton spec listing the file's device-generic tests."""
    from testspecs.authoring import new_skeleton

    _out(new_skeleton(test_file, tests_root=tests_root))


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
        ..., help="e.g. test/test_ops.py::TestCommonPRIVATEUSE1::test_x_add_spyre_float16"
    ),
    spec: list[Path] = typer.Option(
        None, "--spec", help="spec files or folders (default: bundled)"
    ),
    op: str | None = typer.Option(None),
    dtype: str | None = typer.Option(None),
    module: str | None = typer.Option(None),
    device: str = typer.Option("spyre"),
) -> None:
    """Which entry and rule decide this test."""
    from testspecs.errors import SpecError
    from testspecs.loader import load_files
    from testspecs.merge import merge
    from testspecs.resolve import CompiledSpec, resolve

    try:
        merged = merge(load_files(list(spec or [BUNDLED])))
    except SpecError as e:
        _out("\n".join(e.messages))
        raise typer.Exit(1) from None
    decision = resolve(
        CompiledSpec(merged.document, device=device), test_id, op=op, dtype=dtype, module=module
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
