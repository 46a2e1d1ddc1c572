"""Ground truth that survives a new machine: one torch's full run of the bundled suites, stored
in the repository as a compact per-variant outcome file.

A stored run is xz-compressed JSON (``<torch version>-run<N>.json.xz`` in
:data:`STORED_DIR`, ``evaluation/data/groundtruth``): a header naming what made it (the torch
version and build, the backend's version, the bundled suites' content revision and the last
commit that touched them, the date, the run number) and, per test file, its variants in order
with one outcome letter each, their runner-seconds in milliseconds and a short failure message
(an index into one table of distinct messages). Columns per file keep it small: about 31,000
variants take a few hundred KB at most (``docs/selection.md`` gives the measured size).

Two runs of the same torch (run 1 and run 2) are how a flaky variant shows itself
(:func:`flaky`): its outcome differs between them.
"""

from __future__ import annotations

import json
import lzma
import os
import re
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from backends.base import PROJECT_ROOT
from store.outcomes import Outcome

#: where the stored runs live: in the repository, so a fresh clone has them
STORED_DIR = Path(__file__).parent / "data" / "groundtruth"
#: bump when the stored shape changes; a file of another version is refused, not guessed at
STORED_VERSION = 1
FORMAT = "relay-groundtruth-run"
#: one letter per outcome of the store's vocabulary
CODES = {
    Outcome.PASSED: "p",
    Outcome.FAILED: "f",
    Outcome.ERROR: "e",
    Outcome.SKIPPED: "s",
    Outcome.XFAILED: "x",
    Outcome.XPASSED: "X",
    Outcome.CRASHED: "c",
    Outcome.TIMEOUT: "t",
    Outcome.NOT_RUN: "n",
}
OUTCOMES = {code: str(outcome) for outcome, code in CODES.items()}
MESSAGE_CHARS = 120
_VERSION = re.compile(r"^[0-9][0-9A-Za-z.+_-]{0,63}$")


class StoredRunError(Exception):
    """A stored run that cannot be read or written; the message names the file."""


@dataclass(frozen=True)
class RunHeader:
    torch_version: str  # the release, e.g. 2.13.0 (the file's name)
    torch_build: str  # version and git revision, e.g. 2.13.0+git1c0a2bd1cf12
    backend_version: str
    suites: str  # the bundled suites' content revision, e.g. bundled:0123abcd...
    suites_commit: str  # the last commit that touched the suites ("" outside a git checkout)
    date: str  # ISO date the run finished
    run: int  # 1 or 2: two runs of the same torch show its flaky variants


@dataclass
class StoredRun:
    header: RunHeader
    outcomes: dict[str, str]  # test id -> outcome
    seconds: dict[str, float] = field(default_factory=dict)  # test id -> runner-seconds
    messages: dict[str, str] = field(default_factory=dict)  # test id -> first failure line


def run_file(torch_version: str, run: int, folder: Path | None = None) -> Path:
    """Where run ``run`` of ``torch_version`` is stored."""
    if not _VERSION.match(torch_version) or run < 1:
        raise StoredRunError(f"not a torch version and run number: {torch_version!r}, {run}")
    return (folder or STORED_DIR) / f"{torch_version}-run{run}.json.xz"


def short_message(text: str | None) -> str:
    """The first non-blank line of a failure, at most :data:`MESSAGE_CHARS` characters."""
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()[:MESSAGE_CHARS]
    return ""


def encode(stored: StoredRun) -> dict[str, Any]:
    """The stored shape: the header, then per file its variants' names, outcome letters,
    milliseconds and message indexes (-1: none)."""
    table: dict[str, int] = {}
    files: dict[str, dict[str, Any]] = {}
    for tid in sorted(stored.outcomes):
        outcome = stored.outcomes[tid]
        try:
            code = CODES[Outcome(outcome)]
        except ValueError:
            raise StoredRunError(f"{tid}: {outcome!r} is not an outcome") from None
        file, _, rest = tid.partition("::")
        column = files.setdefault(file, {"tests": [], "outcomes": "", "ms": [], "message": []})
        column["tests"].append(rest)
        column["outcomes"] += code
        seconds = stored.seconds.get(tid)
        column["ms"].append(-1 if seconds is None else max(round(seconds * 1000), 0))
        message = short_message(stored.messages.get(tid))
        column["message"].append(table.setdefault(message, len(table)) if message else -1)
    for column in files.values():
        if all(ms == -1 for ms in column["ms"]):
            del column["ms"]
        if all(m == -1 for m in column["message"]):
            del column["message"]
    return {
        "format": FORMAT,
        "version": STORED_VERSION,
        **stored.header.__dict__,
        "variants": len(stored.outcomes),
        "messages": list(table),
        "files": files,
    }


def decode(data: Any, where: str) -> StoredRun:
    """A stored run from its stored shape; anything else is refused naming ``where``."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise StoredRunError(f"{where}: not a stored ground-truth run")
    if data.get("version") != STORED_VERSION:
        raise StoredRunError(
            f"{where}: stored run version {data.get('version')}, this code reads {STORED_VERSION}"
        )
    try:
        header = RunHeader(**{k: data[k] for k in RunHeader.__dataclass_fields__})
        table = [str(m) for m in data["messages"]]
        stored = StoredRun(header=header, outcomes={})
        for file, column in data["files"].items():
            names, codes = column["tests"], column["outcomes"]
            ms = column.get("ms", [-1] * len(names))
            message = column.get("message", [-1] * len(names))
            if not len(names) == len(codes) == len(ms) == len(message):
                raise StoredRunError(f"{where}: {file}: columns of different lengths")
            for name, code, millis, index in zip(names, codes, ms, message, strict=True):
                tid = f"{file}::{name}" if name else file
                stored.outcomes[tid] = OUTCOMES[code]
                if millis >= 0:
                    stored.seconds[tid] = millis / 1000
                if index >= 0:
                    stored.messages[tid] = table[index]
    except (KeyError, TypeError, IndexError, ValueError) as exc:
        raise StoredRunError(f"{where}: malformed stored run ({exc!r})") from None
    if len(stored.outcomes) != data.get("variants"):
        raise StoredRunError(
            f"{where}: {len(stored.outcomes)} variants, header says {data.get('variants')}"
        )
    return stored


def write_run(stored: StoredRun, folder: Path | None = None) -> Path:
    """Write ``stored`` (atomically: a reader never sees half a file); returns its path."""
    path = run_file(stored.header.torch_version, stored.header.run, folder)
    body = json.dumps(encode(stored), separators=(",", ":"), sort_keys=True).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(lzma.compress(body, preset=9))
    tmp.replace(path)
    return path


def read_run(path: Path) -> StoredRun:
    try:
        raw = lzma.decompress(path.read_bytes())
        data = json.loads(raw)
    except OSError as exc:
        raise StoredRunError(f"{path}: {exc.strerror or exc}") from None
    except (lzma.LZMAError, ValueError) as exc:
        raise StoredRunError(f"{path}: not xz-compressed JSON ({exc})") from None
    return decode(data, str(path))


def load_run(torch_version: str, run: int, folder: Path | None = None) -> StoredRun | None:
    """Run ``run`` of ``torch_version``, or None when it is not stored."""
    path = run_file(torch_version, run, folder)
    return read_run(path) if path.is_file() else None


def suites_commit(paths: Iterable[str] = ("spyre_stack/conformance",)) -> str:
    """The last commit that touched the bundled suites, "" outside a git checkout."""
    try:
        proc = subprocess.run(
            ["git", "log", "-1", "--format=%H", "--", *paths],
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout.strip() if proc.returncode == 0 else ""


def make_header(
    *, torch_version: str, torch_build: str, backend_version: str, suites: str, run: int
) -> RunHeader:
    """The header of a run finishing now."""
    return RunHeader(
        torch_version=torch_version,
        torch_build=torch_build,
        backend_version=backend_version,
        suites=suites,
        suites_commit=suites_commit(),
        date=date.today().isoformat(),
        run=run,
    )


def flaky(first: Mapping[str, str], second: Mapping[str, str]) -> set[str]:
    """The variants both runs have whose outcome differs between them."""
    return {t for t in first.keys() & second.keys() if first[t] != second[t]}
