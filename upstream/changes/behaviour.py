"""Behavioural change facts for compiled code: what a wheel's sources cannot show.

A release changes C++ kernels, decompositions and backward formulas that no Python diff shows.
The OpInfo database exercises them: :mod:`upstream.changes.fingerprint_ops` runs every entry's
sample inputs on CPU under one torch and records what it dispatches (forward and backward),
a summary of its outputs and gradients, its errors and its supported dtypes. This module runs it
once per torch build (in that release's environment), caches the result, and compares two:
an entry whose fingerprint changed is a :class:`BehaviourChange` with the reasons, per dtype.

Cache: ``<cache_dir>/fingerprints/v<VERSION>-<digest of the script>-<torch build>.json``; a change
of the script makes new fingerprints, never compares two made by different scripts.

Seeds: the project ships the whole-database fingerprints of the demo release step's two torches
(``fingerprint_seeds/<the cache file's name>.xz``, derived data: figures from running public
wheels), so a cold cache does not spend most of an hour making them. A seed fills the cache only
for exactly its name, so the same version, script digest and torch build (version and git
revision); any other build, or a changed script, computes as before. ``make seed-fingerprints``
(``relay upstream fingerprints --write-seeds``) refreshes them after the script changes.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import math
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from upstream.changes.facts import BehaviourChange

VERSION = 1
SCRIPT = Path(__file__).with_name("fingerprint_ops.py")
SEED_DIR = Path(__file__).with_name("fingerprint_seeds")
SEED_SUFFIX = ".xz"
TIMEOUT_SECONDS = 3600.0
# two value summaries agree within this share of their absolute sums (releases reorder
# floating-point reductions; a real change moves a sum by far more)
RTOL = 1e-3
ATOL = 1e-6
MAX_REASONS = 6

Progress = Callable[[str], None]


class FingerprintError(RuntimeError):
    """The fingerprint script failed or ran past its timeout under one torch."""


@dataclass(frozen=True)
class Side:
    """One torch to fingerprint: its interpreter, its environment variables, its build."""

    python: str
    build: str  # "2.13.0+cpu"
    env: Mapping[str, str] | None = None


def script_digest() -> str:
    return hashlib.sha256(SCRIPT.read_bytes()).hexdigest()[:12]


def fingerprint_path(cache_dir: Path, build: str, only: Sequence[str] = ()) -> Path:
    safe = build.replace("/", "_")
    part = (
        "-only-" + hashlib.sha256("\n".join(sorted(only)).encode()).hexdigest()[:8] if only else ""
    )
    return Path(cache_dir) / "fingerprints" / f"v{VERSION}-{script_digest()}-{safe}{part}.json"


def seed_path(build: str, seed_dir: Path = SEED_DIR) -> Path:
    """The shipped seed that stands for the whole-database fingerprints of ``build`` (which
    need not exist): the cache file's own name, so only that key and build ever match."""
    return seed_dir / (fingerprint_path(Path("."), build).name + SEED_SUFFIX)


def seed_cache(path: Path, build: str, seed_dir: Path = SEED_DIR) -> bool:
    """Fill the missing cache file ``path`` (of ``build``, whole database) from its seed; False
    when no seed has exactly that key and build."""
    seed = seed_path(build, seed_dir)
    if seed.name != path.name + SEED_SUFFIX or not seed.is_file():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(lzma.decompress(seed.read_bytes()))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return True


def write_seed(cache_dir: Path, build: str, seed_dir: Path = SEED_DIR) -> Path:
    """Compress the cached whole-database fingerprints of ``build`` into ``seed_dir`` (the
    refresh after a change of the script: ``make seed-fingerprints``); returns the seed."""
    source = fingerprint_path(cache_dir, build)
    data = json.loads(source.read_text(encoding="utf-8"))
    if not str(build).startswith(f"{data.get('torch')}+git"):
        raise FingerprintError(f"{source} holds torch {data.get('torch')!r}, not {build}")
    seed = seed_path(build, seed_dir)
    seed.parent.mkdir(parents=True, exist_ok=True)
    for old in seed_dir.glob(f"v*-{build.replace('/', '_')}.json{SEED_SUFFIX}"):
        old.unlink()  # the same build's seed from an older script
    seed.write_bytes(lzma.compress(source.read_bytes(), preset=9 | lzma.PRESET_EXTREME))
    return seed


def fingerprints(
    sides: Sequence[Side],
    cache_dir: Path,
    *,
    only: Sequence[str] = (),
    progress: Progress = lambda _: None,
    timeout: float = TIMEOUT_SECONDS,
) -> list[dict[str, Any]]:
    """The fingerprints of each side (cached), the missing ones made side by side; ``only``:
    these entry keys, not the whole database."""
    paths = [fingerprint_path(cache_dir, s.build, only) for s in sides]
    running: list[tuple[Side, Path, subprocess.Popen[bytes], Path]] = []
    tmp = Path(tempfile.mkdtemp(prefix="fingerprints-"))
    for side, path in zip(sides, paths, strict=True):
        if path.is_file() or any(r[1] == path for r in running):
            continue
        if not only and seed_cache(path, side.build):
            progress(f"behaviour fingerprints under torch {side.build}: the project's seed")
            continue
        progress(
            f"behaviour fingerprints of the OpInfo database under torch {side.build} "
            f"(once per build; minutes)"
        )
        log_path = tmp / f"{len(running)}.log"
        out = tmp / f"{len(running)}.json"
        env = dict(os.environ if side.env is None else side.env)
        env.pop("PYTHONPATH", None)  # the script needs torch only; never our modules
        with log_path.open("wb") as log_file:
            proc = subprocess.Popen(
                [
                    side.python,
                    "-P",
                    str(SCRIPT),
                    "--out",
                    str(out),
                    *(a for key in only for a in ("--only", key)),
                ],
                stdout=subprocess.DEVNULL,
                stderr=log_file,
                env=env,
                cwd=tmp,
            )
        running.append((side, path, proc, log_path))
    start = time.monotonic()
    said: dict[str, str] = {}
    try:
        while any(p.poll() is None for _, _, p, _ in running):
            if time.monotonic() - start > timeout:
                raise FingerprintError(f"fingerprints ran past {timeout:.0f} s")
            for side, _, _, log_path in running:
                last = _last_line(log_path)
                if last and said.get(side.build) != last:
                    said[side.build] = last
                    progress(f"torch {side.build}: {last}")
            time.sleep(1.0)
        for side, path, proc, log_path in running:
            out = log_path.with_suffix(".json")
            if proc.returncode != 0 or not out.is_file():
                tail = log_path.read_text(encoding="utf-8", errors="replace").strip()[-600:]
                raise FingerprintError(
                    f"fingerprints under torch {side.build} failed (exit {proc.returncode}): {tail}"
                )
            path.parent.mkdir(parents=True, exist_ok=True)
            os.replace(out, path)
    finally:
        for _, _, proc, _ in running:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return [json.loads(p.read_text(encoding="utf-8")) for p in paths]


def _last_line(path: Path) -> str:
    """The script's latest progress line (torch's own warnings on stderr are not progress)."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return ""
    progress = [line for line in lines if line.startswith("fingerprints:")]
    return progress[-1][:200] if progress else ""


def diff_fingerprints(base: Mapping[str, Any], head: Mapping[str, Any]) -> list[BehaviourChange]:
    """The entries of both fingerprints that behave differently at head. Entries only one side
    has are left to the source facts (added and removed OpInfo entries)."""
    old, new = base.get("entries", {}), head.get("entries", {})
    changes = []
    for key in sorted(set(old) & set(new)):
        dtypes, reasons = _entry_diff(old[key], new[key])
        if reasons:
            name = key.rstrip("#")
            changes.append(BehaviourChange(name=name, dtypes=dtypes, reasons=reasons))
    return changes


def _entry_diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(dtypes, reasons): the dtypes whose behaviour changed (empty: the whole entry)."""
    for problem in ("error", "timeout"):
        if a.get(problem) != b.get(problem):
            return [], [f"entry {problem}: {a.get(problem, 'none')} -> {b.get(problem, 'none')}"]
    if "by_dtype" not in a or "by_dtype" not in b:
        return [], []
    dtypes: set[str] = set()
    reasons: list[str] = []
    for field, what in (("dtypes", "supported dtypes"), ("backward_dtypes", "backward dtypes")):
        gained = sorted(set(b.get(field, [])) - set(a.get(field, [])))
        lost = sorted(set(a.get(field, [])) - set(b.get(field, [])))
        if gained or lost:
            dtypes.update(gained + lost)
            reasons.append(f"{what}: " + _plus_minus(gained, lost))
    for dtype in sorted(set(a["by_dtype"]) & set(b["by_dtype"])):
        why = _dtype_diff(a["by_dtype"][dtype], b["by_dtype"][dtype])
        if why:
            dtypes.add(dtype)
            reasons.append(f"{dtype}: {why}")
    if len(reasons) > MAX_REASONS:
        reasons = [*reasons[:MAX_REASONS], f"... {len(reasons) - MAX_REASONS} more"]
    return sorted(dtypes), reasons


def _plus_minus(gained: Sequence[str], lost: Sequence[str], limit: int = 4) -> str:
    def some(items: Sequence[str]) -> str:
        more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
        return ", ".join(items[:limit]) + more

    parts = ([f"+{some(gained)}"] if gained else []) + ([f"-{some(lost)}"] if lost else [])
    return " ".join(parts)


def _dtype_diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    if "samples" in a or "samples" in b:
        if a.get("samples") != b.get("samples"):
            return f"sample inputs: {a.get('samples', 'built')} -> {b.get('samples', 'built')}"
        return ""
    parts = []
    for field, what in (("fwd", "dispatches"), ("bwd", "backward dispatches")):
        gained = sorted(set(b.get(field, [])) - set(a.get(field, [])))
        lost = sorted(set(a.get(field, [])) - set(b.get(field, [])))
        if gained or lost:
            parts.append(f"{what} " + _plus_minus([_op(x) for x in gained], [_op(x) for x in lost]))
    if a.get("n") != b.get("n"):
        parts.append(f"samples {a.get('n')} -> {b.get('n')}")
    elif a.get("errors") != b.get("errors"):
        parts.append(f"errors {a.get('errors') or 'none'} -> {b.get('errors') or 'none'}"[:160])
    else:
        where = _values_differ(a.get("vals") or [], b.get("vals") or [])
        if where is not None:
            parts.append(f"outputs or gradients differ (sample {where})")
    return "; ".join(parts)


def _op(name: str) -> str:
    return name.removeprefix("aten.")


def _values_differ(a: Sequence[Any], b: Sequence[Any]) -> int | None:
    """The first sample whose summaries disagree (None: all agree within tolerance)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if not _close(x, y):
            return i
    return None


def _close(x: Any, y: Any) -> bool:
    if x == ["random"] or y == ["random"]:
        return True  # a seeded-random output compares nothing
    if isinstance(x, list) and isinstance(y, list):
        if _is_tensor_row(x) and _is_tensor_row(y):
            if x[:2] != y[:2] or x[4:] != y[4:]:
                return False
            scale = max(abs(x[3]), abs(y[3]), 1.0)
            return all(
                (math.isinf(p) and p == q) or abs(p - q) <= RTOL * scale + ATOL
                for p, q in ((x[2], y[2]), (x[3], y[3]))
            )
        return len(x) == len(y) and all(_close(p, q) for p, q in zip(x, y, strict=True))
    return bool(x == y)


def _is_tensor_row(row: list[Any]) -> bool:
    return (
        len(row) == 6
        and isinstance(row[0], list)
        and isinstance(row[1], str)
        and isinstance(row[2], int | float)
    )
