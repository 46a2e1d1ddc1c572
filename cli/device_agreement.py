"""``relay device agreement``: upstream test files run on the simulated device under a backend's
own configs (torch-spyre's ``upstream_tests``), compared with the modes those configs record.

Everything runs through the existing pieces: the configs are loaded and linted by
:mod:`testspecs` (names that match no collected test, tests two entries match), the device's
tests are collected and run by the backend's own pytest command with the spec plugin
(``--spec-report``), and :mod:`testspecs.agreement` compares the report with the configs.

The inputs are never part of the project: local folders, or ``--fetch``, which downloads the
upstream test files and the configs at given commits into ``RELAY_VAR_DIR/upstream-tests/``
(keyed by the commit, so a cached file never goes stale).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from backends import get_backend
from backends.base import fresh_pytest
from cli.specs import pytest_collector
from testspecs.agreement import FileAgreement, agreement, run_skipped_text
from testspecs.collect import CollectedVariant, CollectionError, Collector
from testspecs.errors import SpecError
from testspecs.lint import lint, resolve_spec_path
from testspecs.loader import load_files
from testspecs.report import read_report

RAW_BASE = "https://raw.githubusercontent.com"
#: the upstream files issue #32 measures, and where torch-spyre keeps a config for each
UPSTREAM_FILES = (
    "test_view_ops",
    "test_shape_ops",
    "test_unary_ufuncs",
    "test_binary_ufuncs",
    "test_reductions",
    "test_indexing",
    "test_tensor_creation_ops",
)
CONFIG_PATH = "tests/configs/upstream_tests/{name}_config.yaml"
MAX_DOWNLOAD = 8 * 1024 * 1024
_COMMIT = re.compile(r"^[0-9a-f]{7,40}$")
# lint findings the agreement reports: names matching no collected test, tests two entries
# match, files it could not collect
FINDING_KINDS = ("dead-pattern", "duplicate", "overlap", "overlap-pattern", "collection-error")


class AgreementError(Exception):
    """Bad input (a folder, a commit, a download): one line for the user."""


def fetch_inputs(
    cache: Path,
    *,
    torch_commit: str,
    spyre_commit: str,
    names: tuple[str, ...] = UPSTREAM_FILES,
    base_url: str = RAW_BASE,
    config_path: str = CONFIG_PATH,
) -> tuple[Path, Path]:
    """Download upstream's test files and torch-spyre's configs at the given commits (files
    already in the cache are kept); returns (configs folder, tests root)."""
    for label, commit in (("torch", torch_commit), ("torch-spyre", spyre_commit)):
        if not _COMMIT.match(commit):
            raise AgreementError(f"{label} commit {commit!r} is not a commit hash (7-40 hex)")
    if "{name}" not in config_path or config_path.startswith("/") or ".." in config_path:
        raise AgreementError(f"--config-path {config_path!r}: a relative path with {{name}}")
    bad = [n for n in names if not re.match(r"^[\w.-]+$", n)]
    if bad:
        raise AgreementError(f"{bad[0]!r} is not a test file name")
    tests = cache / f"pytorch-{torch_commit}"
    configs = cache / f"torch-spyre-{spyre_commit}"
    for name in names:
        _download(
            f"{base_url}/pytorch/pytorch/{torch_commit}/test/{name}.py",
            tests / "test" / f"{name}.py",
        )
        remote = config_path.replace("{name}", name)
        _download(
            f"{base_url}/torch-spyre/torch-spyre/{spyre_commit}/{remote}", configs / f"{name}.yaml"
        )
    return configs, tests


def _download(url: str, dest: Path) -> None:
    if dest.is_file():
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            body = response.read(MAX_DOWNLOAD + 1)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise AgreementError(f"could not fetch {url}: {exc}") from None
    if len(body) > MAX_DOWNLOAD:
        raise AgreementError(f"{url}: larger than {MAX_DOWNLOAD} bytes")
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.part")
    tmp.write_bytes(body)
    os.replace(tmp, dest)  # concurrent fetches of one commit write the same bytes


def _memoised(collector: Collector) -> Collector:
    """One pytest collection per file, shared by the lint and the comparison."""
    memo: dict[Path, list[CollectedVariant]] = {}

    def collect(path: Path) -> list[CollectedVariant]:
        key = path.resolve()
        if key not in memo:
            memo[key] = collector(path)
        return memo[key]

    return collect


def config_files(configs: Path) -> list[Path]:
    if not configs.is_dir():
        raise AgreementError(f"{configs}: not a folder of configs")
    found = sorted(p for p in configs.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
    if not found:
        raise AgreementError(f"{configs}: no .yaml configs")
    return found


def measure(
    configs: Path,
    tests: Path,
    *,
    device_model: str | None = None,
    run_skipped: bool = False,
    backend_name: str = "spyre",
    timeout: float = 3600.0,
) -> list[FileAgreement]:
    """The agreement of every test file every config in ``configs`` names (``${TORCH_ROOT}``
    is ``tests``), one file at a time."""
    if not tests.is_dir():
        raise AgreementError(f"{tests}: not a folder (the ${{TORCH_ROOT}} holding test/)")
    tests = tests.resolve()
    collector = _memoised(pytest_collector(backend_name))
    out: list[FileAgreement] = []
    for config in config_files(configs):
        try:
            spec = load_files([config])[0]
        except SpecError as exc:
            out.append(FileAgreement(config=str(config), test_file="", error=exc.messages[0]))
            continue
        files = [
            p
            for f in spec.document.files
            for p in resolve_spec_path(f.path, {"${TORCH_ROOT}": tests})
        ]
        if not files:
            missing = ", ".join(f.path for f in spec.document.files)
            out.append(
                FileAgreement(config=str(config), test_file=missing, error="no such test file")
            )
            continue
        findings = [
            str(f)
            for f in lint([config], tests_root=tests, collector=collector)
            if f.kind in FINDING_KINDS
        ]
        for test_file in files:
            started = time.monotonic()
            result = _one_file(
                config,
                test_file,
                tests,
                collector,
                backend_name,
                device_model,
                run_skipped,
                timeout,
            )
            result.findings = [
                f for f in findings if "collection-error" not in f or str(test_file) in f
            ]
            result.seconds = round(time.monotonic() - started, 1)
            out.append(result)
    return out


def _one_file(
    config: Path,
    test_file: Path,
    tests: Path,
    collector: Collector,
    backend_name: str,
    device_model: str | None,
    run_skipped: bool,
    timeout: float,
) -> FileAgreement:
    spec = load_files([config])[0]
    text = config.read_text(encoding="utf-8")
    try:
        collected = sorted({v.name for v in collector(test_file)})
    except CollectionError as exc:
        return FileAgreement(config=str(config), test_file=str(test_file), error=str(exc))
    backend = get_backend(backend_name)
    with tempfile.TemporaryDirectory(prefix="relay-agreement-") as tmp:
        run_spec = config
        if run_skipped:
            run_spec = Path(tmp) / config.name
            run_spec.write_text(run_skipped_text(text), encoding="utf-8")
        report = Path(tmp) / "report.json"
        args = backend.pytest_args(
            specs=[run_spec],
            options=["--spec-report", str(report)],
            rootdir=tests,
            targets=[str(test_file.resolve())],
        )
        env = {**os.environ, **backend.env, **backend.run_env}
        if device_model:
            env["SPYRE_DEVICE_MODEL"] = device_model
        try:
            proc = subprocess.run(
                fresh_pytest(args),
                cwd=tests,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return FileAgreement(
                config=str(config),
                test_file=str(test_file),
                error=f"timed out after {timeout:.0f} s",
            )
        if not report.is_file():
            lines = (proc.stdout + proc.stderr).strip().splitlines()
            last = lines[-1] if lines else ""
            return FileAgreement(
                config=str(config),
                test_file=str(test_file),
                error=f"pytest exited {proc.returncode} without a report: {last}",
            )
        records = read_report(report)
    return agreement(
        spec, text, records, collected, test_file=str(test_file), run_skipped=run_skipped
    )


def format_results(results: list[FileAgreement], *, tests: Path) -> str:
    """The per-file report, then one table line per file."""
    lines: list[str] = []
    for r in results:
        name = _short(r.test_file, tests)
        lines.append(f"== {name} (config {Path(r.config).name})")
        if r.error:
            lines.append(f"  error: {r.error}")
            continue
        counts = ", ".join(
            f"{r.count(s)} {s}"
            for s in (
                "agree",
                "xpass",
                "unexpected-failure",
                "skipped-by-spec",
                "not-run",
                "shadowed",
                "no-test",
            )
            if r.count(s)
        )
        lines.append(f"  {len(r.names)} entry names: {counts}")
        if r.unlisted:
            shown = ", ".join(f"{n} {k}" for k, n in sorted(r.unlisted.items()))
            lines.append(f"  unlisted tests (unlisted_test_mode): {shown}")
        for title, status in (
            (
                "XPASS: the record says it fails, the simulator passes (by the config's reason)",
                "xpass",
            ),
            (
                "unexpected failures: the record says it passes (by the simulator's error)",
                "unexpected-failure",
            ),
        ):
            groups = r.by_reason(status)
            if groups:
                lines.append(f"  {title}:")
                for reason, names in groups.items():
                    lines.append(f"    [{len(names)}] {reason[:160]}")
                    lines.append(f"        {', '.join(n.split('::')[-1] for n in names)}")
        for failure in r.unlisted_failures[:20]:
            lines.append(f"  unlisted failure: {failure[:200]}")
        lines += [f"  {f}" for f in r.findings]
        lines.append(f"  wall time {r.seconds:.1f} s")
    lines.append("")
    lines.append(
        f"{'file':32} {'agree':>6} {'compared':>9} {'%':>6} {'entries':>8} {'findings':>9} {'s':>7}"
    )
    for r in results:
        pct = f"{r.percent:.1f}" if r.percent is not None else "-"
        shown = (
            "error"
            if r.error
            else f"{r.count('agree'):>6} {r.compared:>9} {pct:>6} {len(r.names):>8}"
        )
        lines.append(
            f"{_short(r.test_file, tests)[:32]:32} {shown} {len(r.findings):>9} {r.seconds:>7.1f}"
        )
    return "\n".join(lines)


def _short(path: str, root: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(root.resolve()))
    except ValueError:
        return path
