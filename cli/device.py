"""`relay device ...`: commands about the bundled simulated Spyre device."""

from __future__ import annotations

import json
from pathlib import Path
from typing import NoReturn

import typer

app = typer.Typer(help="The bundled simulated Spyre device.", no_args_is_help=True)


@app.command()
def info(as_json: bool = typer.Option(False, "--json", help="print JSON instead of text")) -> None:
    """Show the simulated cards, memory, op policy, build cache and op-table summary."""
    from spyre_stack.info import device_info, format_info

    data = device_info()
    typer.echo(json.dumps(data, indent=2) if as_json else format_info(data))


@app.command()
def ops(status: str = typer.Argument("native", help="native, fallback or unsupported")) -> None:
    """List the op-table entries with a status."""
    from spyre_stack import optable

    if status not in optable.STATUSES:
        known = ", ".join(optable.STATUSES)
        typer.echo(f"error: unknown status {status!r} (one of {known})", err=True)
        raise typer.Exit(2)
    for entry in optable.load().by_status(status):
        typer.echo(f"{entry.name:32} {entry.kind:10} {','.join(entry.dtypes)}")


@app.command()
def agreement(
    configs: Path | None = typer.Option(
        None, help="folder of a backend's configs (one YAML per test file)"
    ),
    tests: Path | None = typer.Option(
        None, help="the ${TORCH_ROOT} the configs name (holds test/)"
    ),
    device_model: str | None = typer.Option(
        None, help="SPYRE_DEVICE_MODEL for the runs: simulator or card (default: the environment's)"
    ),
    run_skipped: bool = typer.Option(
        False, "--run-skipped", help="run the configs' skip entries as xfail and compare them too"
    ),
    fetch: bool = typer.Option(
        False,
        "--fetch",
        help="download the files at --torch-commit / --spyre-commit to RELAY_VAR_DIR",
    ),
    torch_commit: str | None = typer.Option(None, help="with --fetch: PyTorch's commit"),
    spyre_commit: str | None = typer.Option(None, help="with --fetch: torch-spyre's commit"),
    file: list[str] = typer.Option(
        None,
        "--file",
        help="with --fetch: a test file name (repeatable; default: issue #32's seven)",
    ),
    source: str = typer.Option(
        "https://raw.githubusercontent.com", "--from", help="with --fetch: base URL of raw files"
    ),
    config_path: str = typer.Option(
        "tests/configs/upstream_tests/{name}_config.yaml",
        help="with --fetch: a config's path in torch-spyre ({name} is the test file's name)",
    ),
    timeout: float = typer.Option(3600.0, help="seconds one test file may run"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of text"),
) -> None:
    """Run upstream test files on the simulated device under a backend's own configs
    (torch-spyre's `upstream_tests`) and report, per file, the entries whose simulated outcome
    agrees with the recorded mode, XPASS and unexpected failures grouped by reason, names that
    match no collected test and tests two entries match. Exit 1 when a file could not be run."""
    from cli import device_agreement as da
    from config.settings import get_settings

    if device_model is not None and device_model not in ("simulator", "card"):
        _fail(f"--device-model must be simulator or card, not {device_model!r}")
    try:
        if fetch:
            if not torch_commit or not spyre_commit:
                _fail("--fetch needs --torch-commit and --spyre-commit")
            configs, tests = da.fetch_inputs(
                get_settings().var_dir / "upstream-tests",
                torch_commit=torch_commit,
                spyre_commit=spyre_commit,
                names=tuple(file or da.UPSTREAM_FILES),
                base_url=source.rstrip("/"),
                config_path=config_path,
            )
        if configs is None or tests is None:
            _fail("give --configs and --tests (or --fetch)")
        results = da.measure(
            configs, tests, device_model=device_model, run_skipped=run_skipped, timeout=timeout
        )
    except da.AgreementError as exc:
        _fail(str(exc))
    if as_json:
        typer.echo(json.dumps([r.to_json() for r in results], indent=2))
    else:
        typer.echo(da.format_results(results, tests=tests))
    if any(r.error for r in results):
        raise typer.Exit(1)


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)
