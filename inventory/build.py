"""The test inventory: every collectable variant for a revision, a backend and a set of specs.

Each :class:`Variant` carries its test id, file, class, base test name, op or module, dtype, the
spec decision (from :mod:`testspecs`), tags and the last known duration with where it came from.

Collection (:mod:`inventory.collection`: a pytest ``--collect-only`` subprocess with
:mod:`inventory.collect_plugin`) is the slow part, so the result is cached under
``RELAY_VAR_DIR/inventory`` (each host its own; an entry the host lacks is copied from
``RELAY_CACHE_SEED`` when there, else collected, and the log says so):

* the collection is keyed by (revision, torch build, backend version, source selection);
* the spec decisions by that key plus the specs hash.

Changing a spec re-resolves decisions from the cached collection; changing a test file, torch or
the backend re-collects. Durations are applied on every load (our history first, then PyTorch's
public per-file test times where a checkout is used), since they change between runs.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import subprocess
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from backends import Backend, get_backend
from backends.base import PROJECT_ROOT, torch_build
from config.settings import ci_stats_dir
from inventory.collection import Progress, Source, collect
from inventory.sources import BundledSuites, CheckoutTests, InventoryError, ci_file_key
from selector.model import Universe, Variant
from store import caches

log = logging.getLogger(__name__)

# Bump when the stored shape or the collection method changes: old cache entries are ignored.
INVENTORY_VERSION = 3
# PyTorch's test-times.json in the CI-statistics folder (RELAY_CI_STATS); optional
DEFAULT_TEST_TIMES = ci_stats_dir() / "test-times.json"


@dataclass(frozen=True)
class InventoryKey:
    revision: str
    torch_build: str
    specs_hash: str
    backend_version: str
    source: str

    def collection_id(self) -> str:
        import hashlib

        text = json.dumps(
            [INVENTORY_VERSION, self.revision, self.torch_build, self.backend_version, self.source]
        )
        return hashlib.sha256(text.encode()).hexdigest()[:20]


@dataclass
class Inventory:
    key: InventoryKey
    backend: str
    variants: list[Variant]
    errors: list[dict[str, str]]
    collect_seconds: float
    cached: bool
    specs: list[str] = field(default_factory=list)
    # classes the file restricts with only_for to other devices: not collectable for the backend
    # without a generated wrapper module (see restricted_classes)
    restricted: list[dict[str, Any]] = field(default_factory=list)

    def select(self, *, suites: Iterable[str] = ()) -> list[Variant]:
        wanted = set(suites)
        return [v for v in self.variants if not wanted or v.suite in wanted]

    def count_by(self, attr: str, variants: list[Variant] | None = None) -> Counter[str]:
        rows = self.variants if variants is None else variants
        return Counter(str(getattr(v, attr) if getattr(v, attr) is not None else "-") for v in rows)

    def runnable(self) -> list[Variant]:
        return [v for v in self.variants if v.decision != "skip"]


# ----------------------------------------------------------------------------- spec decisions


def specs_hash(paths: Iterable[Path]) -> str:
    """The specs' content: each file's bytes under its name inside the folder given (a file
    given alone: its name), so the same specs hash the same in any checkout (not their path)."""
    digest = hashlib.sha256()
    named = 0
    for p in paths:
        p = Path(p)
        for q in _spec_files([p]):
            name = q.relative_to(p).as_posix() if p.is_dir() else q.name
            digest.update(f"{name}\0".encode() + q.read_bytes() + b"\0")
            named += 1
    return digest.hexdigest()[:16] if named else "none"


def _spec_files(paths: Iterable[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            out += sorted(q for q in p.rglob("*") if q.suffix in {".yaml", ".yml"} and q.is_file())
        elif p.is_file():
            out.append(p)
        else:
            raise InventoryError(f"spec path {p} does not exist")
    return out


Resolver = Callable[[Variant], tuple[str, str, list[str]]]


def spec_resolver(
    spec_paths: Iterable[Path], *, backend: str, torch_root: Path | None
) -> Resolver | None:
    """A function variant -> (mode, rule, tags) built from the spec files, or None without specs.

    testspecs is imported here, lazily: the inventory itself does not need it.
    """
    files = _spec_files(spec_paths)
    if not files:
        return None
    from testspecs.compiled import compile_spec
    from testspecs.loader import load_files
    from testspecs.merge import merge
    from testspecs.resolve import resolve

    merged = merge(load_files(files))
    compiled = compile_spec(
        merged.document,
        device=backend,
        torch_root=str(torch_root) if torch_root else None,
        device_root=str(PROJECT_ROOT),
    )

    def decide(v: Variant) -> tuple[str, str, list[str]]:
        generic = _generic_class(v.cls, backend)
        base = f"{generic}::{v.base}" if generic else v.base
        variant_id = f"{v.file}::{v.cls}::{v.name}" if v.cls else f"{v.file}::{v.name}"
        d = resolve(compiled, variant_id, op=v.op, dtype=v.dtype, module=v.module, base=base)
        return d.mode, d.rule, list(d.tags)

    return decide


def _generic_class(cls: str | None, backend: str) -> str | None:
    if cls is None:
        return None
    for suffix in ("PRIVATEUSE1", backend.upper()):
        if cls.endswith(suffix) and len(cls) > len(suffix):
            return cls[: -len(suffix)]
    return cls


# ----------------------------------------------------------------------------- durations


def load_history(path: Path | None) -> dict[str, float]:
    """Our own durations: a JSON object {test id: seconds} (for example exported from runs)."""
    if path is None:
        return {}
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return {str(k): float(v) for k, v in data.items()}


def ci_file_times(
    path: Path | None, *, job: str = "default", config: str = "default"
) -> dict[str, float]:
    """PyTorch's public per-file test times for one CI job and config ("default" fallbacks)."""
    if path is None or not Path(path).is_file():
        return {}
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    by_job = data.get(job) or data.get("default") or {}
    table = by_job.get(config) or by_job.get("default") or {}
    return {str(k): float(v) for k, v in table.items()}


def apply_durations(
    variants: list[Variant],
    *,
    history: Mapping[str, float],
    file_times: Mapping[str, float],
    checkout: bool,
) -> None:
    per_file = Counter(v.file for v in variants)
    for v in variants:
        if v.test_id in history:
            v.duration, v.duration_source = history[v.test_id], "history"
            continue
        seconds = file_times.get(ci_file_key(v.file)) if checkout else None
        if seconds is not None:
            v.duration = seconds / per_file[v.file]
            v.duration_source = "pytorch-ci-file-prior"
        else:
            v.duration, v.duration_source = None, None


# ----------------------------------------------------------------------------- only_for


def restricted_classes(files: Mapping[str, Path], *, device_type: str) -> list[dict[str, Any]]:
    """Classes a file instantiates with ``only_for`` that excludes ``device_type``.

    Read from the source (testspecs.collect, no import): upstream restricts some classes to
    ``cpu``/``cuda``; they are not collectable for the backend unless a wrapper module
    instantiates them for it.
    """
    from testspecs.collect import collect_file

    found: dict[tuple[str, str], dict[str, Any]] = {}
    for path in files.values():
        for test in collect_file(path):
            if test.only_for is None or device_type in {d.lower() for d in test.only_for}:
                continue
            row = found.setdefault(
                (str(path), test.cls),
                {"file": str(path), "cls": test.cls, "only_for": list(test.only_for), "tests": 0},
            )
            row["tests"] += 1
    return list(found.values())


# ----------------------------------------------------------------------------- build and cache


def build_inventory(
    source: Source,
    *,
    backend: str = "spyre",
    specs: Iterable[Path] = (),
    history: Path | Mapping[str, float] | None = None,
    test_times: Path | None = DEFAULT_TEST_TIMES,
    cache_dir: Path | None = None,
    refresh: bool = False,
    python: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    progress: Progress | None = None,
) -> Inventory:
    """The inventory for ``source`` on ``backend`` with ``specs``, from the cache when current
    (``progress`` hears of a collection file by file).

    ``python`` collects with another interpreter (for example a head environment of
    :mod:`upstream.headenv`, run with its ``env``); the key then holds that interpreter's torch
    build, so each torch has its own cache entry. ``cache_dir`` unset: the host's
    (``RELAY_VAR_DIR/inventory``), seeded from ``RELAY_CACHE_SEED``.
    """
    be = get_backend(backend)
    spec_paths = [Path(p) for p in specs]
    interpreter = str(python) if python is not None else None
    key = InventoryKey(
        revision=source.revision(),
        torch_build=torch_build() if interpreter is None else torch_build_of(interpreter, env=env),
        specs_hash=specs_hash(spec_paths),
        backend_version=be.version(),
        source=f"{source.kind}:{','.join(source.targets())}",
    )
    if cache_dir is None:
        cache_dir = caches.cache_dir("inventory")
        for path in _paths(cache_dir, key) if not refresh else ():
            caches.seeded(path)
    collection = None if refresh else _load(cache_dir, key)
    cached = collection is not None
    if collection is None:
        with _collecting(cache_dir, key):  # another process may be collecting the same key
            collection = None if refresh else _load(cache_dir, key)
            cached = collection is not None
            if collection is None:
                collection = _collect(source, be, key, cache_dir, interpreter, env, progress)
    variants = [_variant(r, source) for r in collection["records"]]

    _apply_specs(variants, source, spec_paths, be.name, cache_dir, key, refresh=refresh)
    wrapped = {_generic_class(v.cls, be.name) for v in variants if v.via}
    hist = history if isinstance(history, Mapping) else load_history(history)
    apply_durations(
        variants,
        history=hist,
        file_times=ci_file_times(test_times) if isinstance(source, CheckoutTests) else {},
        checkout=isinstance(source, CheckoutTests),
    )
    return Inventory(
        key=key,
        backend=be.name,
        variants=variants,
        errors=collection["errors"],
        collect_seconds=float(collection["collect_seconds"]),
        cached=cached,
        specs=[str(p) for p in spec_paths],
        restricted=[
            r
            for r in restricted_classes(
                source.files(), device_type=be.env.get("PYTORCH_TESTING_DEVICE_ONLY_FOR", be.name)
            )
            if r["cls"] not in wrapped
        ],
    )


@contextmanager
def _collecting(cache_dir: Path, key: InventoryKey) -> Iterator[None]:
    """One collection of ``key`` at a time on a host (the second process waits, then reads the
    first one's entry): an OS lock that dies with its process, on a lock file removed with the
    lock, so the cache folder holds only its entries (a waiter on a removed file tries again)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    lock = cache_dir / f".collect-{key.collection_id()}.lock"
    while True:
        with lock.open("a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)  # released when the file is closed
            try:
                current = os.stat(lock).st_ino == os.fstat(fh.fileno()).st_ino
            except FileNotFoundError:
                current = False
            if current:
                try:
                    yield
                finally:
                    lock.unlink(missing_ok=True)
                return


def _collect(
    source: Source,
    be: Backend,
    key: InventoryKey,
    cache_dir: Path,
    interpreter: str | None,
    env: Mapping[str, str] | None,
    progress: Progress | None,
) -> dict[str, Any]:
    """Collect ``source`` on backend ``be`` and store it under ``key``."""
    caches.building(_paths(cache_dir, key)[0], f"inventory of {key.source} ({key.torch_build})")
    records, errors, seconds = collect(
        source,
        be,
        python=interpreter,
        env=env,
        progress=progress,
        wrapper_dir=cache_dir / "wrappers" / key.collection_id(),
    )
    collection = {"records": records, "errors": errors, "collect_seconds": seconds}
    _store(cache_dir, key, collection)
    log.info("inventory collected", extra={"variants": len(records), "seconds": round(seconds, 1)})
    return collection


def _apply_specs(
    variants: list[Variant],
    source: Source,
    spec_paths: list[Path],
    backend: str,
    cache_dir: Path,
    key: InventoryKey,
    *,
    refresh: bool,
) -> None:
    """Each variant's spec decision (mode, rule, tags), cached beside the collection."""
    decisions = None if refresh else _load_decisions(cache_dir, key)
    if decisions is None or len(decisions) != len(variants):
        torch_root = Path(source.root) if isinstance(source, CheckoutTests) else None
        decide = spec_resolver(spec_paths, backend=backend, torch_root=torch_root)
        decisions = [list(decide(v)) if decide else [None, None, []] for v in variants]
        _store_decisions(cache_dir, key, decisions)
    for v, (mode, rule, tags) in zip(variants, decisions, strict=True):
        v.decision, v.rule, v.tags = mode, rule, list(tags)


def universe_from_inventory(
    *,
    backend: str = "spyre",
    suites: Sequence[str] = (),
    checkout: str | Path | None = None,
    test_files: Sequence[str] = (),
    specs: Sequence[Path] = (),
    cache_dir: Path | None = None,
    python: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    progress: Progress | None = None,
) -> Universe:
    """The collected universe: the bundled suites, or ``test_files`` of a checkout (collected by
    ``python``, with ``env``, when given: a head environment's interpreter)."""
    if checkout is not None and test_files:
        source: BundledSuites | CheckoutTests = CheckoutTests(Path(checkout), tuple(test_files))
        kind = "checkout"
    else:
        source, kind = BundledSuites(tuple(suites)), "bundled"
    inv = build_inventory(
        source,
        backend=backend,
        specs=specs,
        cache_dir=cache_dir,
        python=python,
        env=env,
        progress=progress,
    )
    return Universe(
        variants=inv.variants,
        label=f"{inv.key.revision} ({inv.key.torch_build})",
        kind=kind,
        key=f"{inv.key.torch_build}-{inv.key.backend_version}",
    )


def torch_build_of(python: str, *, env: Mapping[str, str] | None = None) -> str:
    """:func:`torch_build` as another interpreter sees it (which must import this project)."""
    code = "from backends.base import torch_build; print(torch_build())"
    try:
        proc = subprocess.run(
            [python, "-P", "-c", code],
            cwd=PROJECT_ROOT,
            env=dict(os.environ if env is None else env),
            capture_output=True,
            text=True,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InventoryError(f"cannot run {python}: {exc}") from None
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stdout + proc.stderr).strip()[-1500:]
        raise InventoryError(f"{python} cannot tell its torch build:\n{tail}")
    return lines[-1]


def _variant(record: dict[str, Any], source: Source) -> Variant:
    return Variant(
        test_id=record["test_id"],
        file=record["file"],
        cls=record.get("cls"),
        name=record["name"],
        base=record["base"],
        suite=source.suite_of(record["file"]),
        op=record.get("op"),
        module=record.get("module"),
        dtype=record.get("dtype"),
        params=record.get("params") or {},
        marks=record.get("marks") or [],
        static_skip=record.get("static_skip"),
        via=record.get("via"),
    )


#: the fields of a collected record (:func:`_variant` reads them back); a stored universe keeps
#: these and the spec decision of each variant, the inventory cache's two shapes
RECORD_FIELDS: tuple[str, ...] = ("test_id", "file", "cls", "name", "base", "op", "module")
RECORD_FIELDS += ("dtype", "params", "marks", "static_skip", "via", "suite")


def universe_records(universe: Universe) -> tuple[list[dict[str, Any]], list[list[Any]]]:
    """The universe in the inventory cache's shapes: its collected records (empty fields left
    out; with each variant's suite, which a collection derives from the source) and its spec
    decisions (mode, rule, tags) in the same order."""
    records = []
    for v in universe.variants:
        values = {f: getattr(v, f) for f in RECORD_FIELDS}
        records.append({f: x for f, x in values.items() if x not in (None, [], {})})
    return records, [[v.decision, v.rule, list(v.tags)] for v in universe.variants]


def universe_from_records(
    records: list[dict[str, Any]],
    decisions: list[list[Any]],
    *,
    label: str,
    kind: str,
    key: str,
    flags: Mapping[str, str] | None = None,
) -> Universe:
    """A universe from :func:`universe_records`' shapes (the suite of each file as the bundled
    suites name it)."""
    if len(records) != len(decisions):
        raise ValueError(f"{len(records)} records, {len(decisions)} decisions")
    source = BundledSuites()
    variants = [_variant(r, source) for r in records]
    for v, r in zip(variants, records, strict=True):
        v.suite = r.get("suite") or v.suite
    for v, (mode, rule, tags) in zip(variants, decisions, strict=True):
        v.decision, v.rule, v.tags = mode, rule, list(tags)
    return Universe(variants=variants, label=label, kind=kind, key=key, flags=dict(flags or {}))


def _paths(cache_dir: Path, key: InventoryKey) -> tuple[Path, Path]:
    cid = key.collection_id()
    return cache_dir / f"collect-{cid}.json", cache_dir / f"decisions-{cid}-{key.specs_hash}.json"


def _load(cache_dir: Path, key: InventoryKey) -> dict[str, Any] | None:
    path, _ = _paths(cache_dir, key)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    stored = dict(data.get("key") or {})
    wanted = asdict(key)
    stored.pop("specs_hash", None)
    wanted.pop("specs_hash")
    if data.get("version") != INVENTORY_VERSION or stored != wanted:
        return None
    return data


def _store(cache_dir: Path, key: InventoryKey, collection: dict[str, Any]) -> None:
    path, _ = _paths(cache_dir, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(
        json.dumps({"version": INVENTORY_VERSION, "key": asdict(key), **collection}),
        encoding="utf-8",
    )
    tmp.replace(path)


def _load_decisions(cache_dir: Path, key: InventoryKey) -> list[Any] | None:
    _, path = _paths(cache_dir, key)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data.get("decisions") if data.get("key") == asdict(key) else None


def _store_decisions(cache_dir: Path, key: InventoryKey, decisions: list[Any]) -> None:
    _, path = _paths(cache_dir, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"key": asdict(key), "decisions": decisions}), encoding="utf-8")
    tmp.replace(path)
