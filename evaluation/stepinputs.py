"""What a release step's plans read, stored beside its runs: a fresh clone plans without wheels.

A release step's plans (``planner.release.release_plan``, made by ``relay eval --kind release``)
read three things a fresh clone does not have: each torch's universe collected in its own
environment (minutes, in an environment of 1 to 7 GB), the change facts between the two wheels
(with the OpInfo behaviour fingerprints of both torches applied) and what the selector's
signals learn from the upstream files at base and head (from the wheels, about 0.5 to 0.9 GB
each). Derived data only is stored (never an upstream file's content), in the repository
beside the runs (:data:`evaluation.storedruns.STORED_DIR`), as xz-compressed JSON:

- ``<torch version>-universe.json.xz``: one torch's collected universe in the inventory cache's
  two shapes (:func:`inventory.build.universe_records`: the collected records and the spec
  decisions), its label and key, and the import map our runs learned under that torch when
  the host that wrote it had one;
- ``<base>_to_<head>-step.json.xz``: the step's change facts (fingerprints applied), the source's
  layout, the content digest of every upstream file the plans read at base and at head (the
  key of the signals' file facts; :class:`RecordingSource` records them while the plans are
  made, :class:`StoredSource` serves them back), the file facts the signals learned from
  those files, named by the selector code that learned them, and the OpInfo entries' dtypes
  the head estimate reads (:func:`inventory.head.entry_dtype_facts`).

Each names what made it (torch build, backend version, suites revision and commit, date) like a
stored run's header; a file of another format version is refused with its name.
"""

from __future__ import annotations

import json
import lzma
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from evaluation.storedruns import STORED_DIR, suites_commit
from inventory.build import universe_from_records, universe_records
from inventory.importmap import map_key
from selector import Universe
from selector.signals import content_digest
from store import caches
from upstream.base import (
    FileChange,
    ResolvedRevision,
    SourceLayout,
    UnknownRevisionError,
    UpstreamFileNotFoundError,
)
from upstream.changes import ChangeFacts

FORMAT = "relay-step-input"
#: bump when a stored input's shape changes; a file of another version is refused, not guessed at
#: per kind of input; a step's 2: the read files' digests, not their contents
INPUTS_VERSION = {"universe": 1, "step": 2}
_VERSION = re.compile(r"^[0-9][0-9A-Za-z.+_-]{0,63}$")


class StepInputError(Exception):
    """A stored step input that cannot be read or written; the message names the file."""


@dataclass(frozen=True)
class InputHeader:
    name: str  # the torch version (a universe) or "base -> head" (a step)
    torch_build: str  # the torch build (a universe), "base build -> head build" (a step)
    backend_version: str
    suites: str  # the bundled suites' content revision
    suites_commit: str  # the last commit that touched them ("" outside a git checkout)
    date: str


@dataclass
class StoredUniverse:
    header: InputHeader
    universe: Universe
    import_map: dict[str, Any] | None = None  # the learned import map's JSON, when stored


@dataclass
class StoredStepInput:
    header: InputHeader
    facts: ChangeFacts
    layout: SourceLayout
    # base|head -> path -> content digest of each upstream file the plans read
    digests: dict[str, dict[str, str]] = field(default_factory=dict)
    # what the selector's signals learned from those files while the plans were made (its
    # file facts store's entries), learned by the selector code named by ``selector``
    # (``v<memo version>-<digest of the signals' code>``)
    selector: str = ""
    file_facts: dict[str, Any] = field(default_factory=dict)
    # what the head estimate reads of the OpInfo files (:func:`inventory.head.entry_dtype_facts`)
    entry_dtypes: dict[str, Any] | None = None


def make_header(*, name: str, torch_build: str, backend_version: str, suites: str) -> InputHeader:
    return InputHeader(
        name=name,
        torch_build=torch_build,
        backend_version=backend_version,
        suites=suites,
        suites_commit=suites_commit(),
        date=date.today().isoformat(),
    )


def _checked(version: str) -> str:
    if not _VERSION.match(version):
        raise StepInputError(f"not a torch version: {version!r}")
    return version


def universe_file(version: str, folder: Path | None = None) -> Path:
    return (folder or STORED_DIR) / f"{_checked(version)}-universe.json.xz"


def step_file(base: str, head: str, folder: Path | None = None) -> Path:
    return (folder or STORED_DIR) / f"{_checked(base)}_to_{_checked(head)}-step.json.xz"


# -- reading and writing ---------------------------------------------------------------


def _write(path: Path, kind: str, header: InputHeader, body: dict[str, Any]) -> Path:
    data = {
        "format": FORMAT,
        "kind": kind,
        "version": INPUTS_VERSION[kind],
        **header.__dict__,
        **body,
    }
    raw = json.dumps(data, separators=(",", ":"), sort_keys=True).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(lzma.compress(raw, preset=9))
    tmp.replace(path)
    return path


def _read(path: Path, kind: str) -> tuple[InputHeader, dict[str, Any]]:
    try:
        data = json.loads(lzma.decompress(path.read_bytes()))
    except OSError as exc:
        raise StepInputError(f"{path}: {exc.strerror or exc}") from None
    except (lzma.LZMAError, ValueError) as exc:
        raise StepInputError(f"{path}: not xz-compressed JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("kind") != kind:
        raise StepInputError(f"{path}: not a stored {kind} input")
    if data.get("version") != INPUTS_VERSION[kind]:
        raise StepInputError(
            f"{path}: stored {kind} input version {data.get('version')}, this code reads "
            f"{INPUTS_VERSION[kind]}: `relay eval --kind release --from A --to B --run` (on a "
            "host with the wheels) makes it again"
        )
    try:
        header = InputHeader(**{k: str(data[k]) for k in InputHeader.__dataclass_fields__})
    except KeyError as exc:
        raise StepInputError(f"{path}: malformed stored input (no {exc})") from None
    return header, data


def write_universe(stored: StoredUniverse, folder: Path | None = None) -> Path:
    records, decisions = universe_records(stored.universe)
    u = stored.universe
    body = {
        "universe": {"label": u.label, "kind": u.kind, "key": u.key, "flags": u.flags},
        "variants": len(records),
        "records": records,
        "decisions": decisions,
        "import_map": stored.import_map,
    }
    return _write(universe_file(stored.header.name, folder), "universe", stored.header, body)


def read_universe(path: Path) -> StoredUniverse:
    header, data = _read(path, "universe")
    try:
        meta = data["universe"]
        universe = universe_from_records(
            data["records"],
            data["decisions"],
            label=str(meta["label"]),
            kind=str(meta["kind"]),
            key=str(meta["key"]),
            flags=meta.get("flags") or {},
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise StepInputError(f"{path}: malformed stored universe ({exc!r})") from None
    if len(universe) != data.get("variants"):
        raise StepInputError(f"{path}: {len(universe)} variants, header says {data['variants']}")
    return StoredUniverse(header=header, universe=universe, import_map=data.get("import_map"))


def write_step_input(stored: StoredStepInput, folder: Path | None = None) -> Path:
    facts = stored.facts
    body = {
        "facts": json.loads(facts.model_dump_json()),
        "layout": stored.layout.model_dump(),
        "digests": {side: dict(sorted(stored.digests.get(side, {}).items())) for side in _SIDES},
        "file_facts": {"selector": stored.selector, "entries": stored.file_facts},
        "entry_dtypes": stored.entry_dtypes,
    }
    path = step_file(_version(facts.base.resolved), _version(facts.head.resolved), folder)
    return _write(path, "step", stored.header, body)


def read_step_input(path: Path) -> StoredStepInput:
    header, data = _read(path, "step")
    try:
        facts = ChangeFacts.model_validate(data["facts"])
        layout = SourceLayout.model_validate(data["layout"])
        digests = {
            side: {str(p): str(d) for p, d in data["digests"][side].items()} for side in _SIDES
        }
        memo = data.get("file_facts") or {}
        selector, entries = str(memo.get("selector", "")), dict(memo.get("entries") or {})
    except (KeyError, TypeError, ValueError) as exc:
        raise StepInputError(f"{path}: malformed stored step input ({exc!r})") from None
    dtypes = data.get("entry_dtypes")
    return StoredStepInput(header, facts, layout, digests, selector, entries, dtypes)


_SIDES = ("base", "head")


def _version(resolved: str) -> str:
    return resolved.split("+", 1)[0]


# -- the upstream source the plans read ------------------------------------------------


class RecordingSource:
    """An upstream source that keeps the content digest of every file read through it (per
    side of ``facts``), so a step's plans can be made again from the stored digests and file
    facts; everything else is the wrapped source's."""

    def __init__(self, source: Any, facts: ChangeFacts, cache_dir: Path | None = None) -> None:
        self._source = source
        self._sides = {facts.base.resolved: "base", facts.head.resolved: "head"}
        self.digests: dict[str, dict[str, str]] = {"base": {}, "head": {}}
        # the signals' file facts kept in ``cache_dir`` (an empty folder: a signal that found
        # its answer in the source's own store would not read the files a fresh clone's plans
        # read), or in this process when None
        self.cache_dir = cache_dir

    def __getattr__(self, name: str) -> Any:
        return getattr(self._source, name)

    def read_file(self, revision: ResolvedRevision, path: str) -> bytes:
        try:
            data: bytes = self._source.read_file(revision, path)
        except UpstreamFileNotFoundError:
            self._keep(revision, [path], {})
            raise
        self._keep(revision, [path], {path: data})
        return data

    def read_files(self, revision: ResolvedRevision, paths: Iterable[str]) -> dict[str, bytes]:
        asked = list(paths)
        got: dict[str, bytes] = self._source.read_files(revision, asked)
        self._keep(revision, asked, got)
        return got

    def _keep(
        self, revision: ResolvedRevision, asked: Iterable[str], files: Mapping[str, bytes]
    ) -> None:
        side = self._sides.get(revision.resolved)
        if side is None:
            raise UnknownRevisionError(f"{revision.resolved}: not a side of the recorded step")
        # a file the source does not have is kept as "-" (the signals' digest of a missing file)
        self.digests[side].update({p: "-" for p in asked if p not in files})
        self.digests[side].update({p: content_digest(data) for p, data in files.items()})


class StoredSource:
    """The upstream source of a stored step: its two revisions, its changed files and the
    content digests of the files its plans read (:meth:`content_digest`, which keys the stored
    file facts). No file's content is here: a read is a missing file, and is kept in
    :attr:`unread` (a signal asked for a fact the stored file facts do not hold)."""

    def __init__(self, stored: StoredStepInput, cache_dir: Path | None = None) -> None:
        self.cache_dir = cache_dir  # where the signals' file facts are kept (None: this process)
        self.facts = stored.facts
        self.layout = stored.layout
        self.kind = stored.facts.source_kind
        self._digests = stored.digests
        self._entry_dtypes = stored.entry_dtypes
        # (side, path) of every read of a file that existed when the plans were recorded
        self.unread: set[tuple[str, str]] = set()
        self._sides = {stored.facts.base.resolved: "base", stored.facts.head.resolved: "head"}

    def resolve(self, revision: str) -> ResolvedRevision:
        for rev in (self.facts.base, self.facts.head):
            if revision in (rev.requested, rev.resolved, _version(rev.resolved)):
                return rev
        raise UnknownRevisionError(f"{revision}: not a side of the stored step")

    def _side(self, revision: ResolvedRevision) -> str:
        side = self._sides.get(revision.resolved)
        if side is None:
            raise UnknownRevisionError(f"{revision.resolved}: not a side of the stored step")
        return side

    def entry_dtype_facts(self) -> dict[str, Any] | None:
        """The stored answer of :func:`inventory.head.entry_dtype_facts` (None: not stored)."""
        return self._entry_dtypes

    def content_digest(self, revision: ResolvedRevision, path: str) -> str | None:
        return self._digests.get(self._side(revision), {}).get(path)

    def list_files(self, revision: ResolvedRevision, prefix: str = "") -> list[str]:
        files = self._digests.get(self._side(revision), {})
        return sorted(p for p, d in files.items() if d != "-" and p.startswith(prefix))

    def read_file(self, revision: ResolvedRevision, path: str) -> bytes:
        self.read_files(revision, [path])
        raise UpstreamFileNotFoundError(f"{path}: no upstream file's content is stored")

    def read_files(self, revision: ResolvedRevision, paths: Iterable[str]) -> dict[str, bytes]:
        side = self._side(revision)
        known = self._digests.get(side, {})
        # a file the recorded plans found missing ("-") is missing here too, not unread
        self.unread.update((side, p) for p in paths if known.get(p) != "-")
        return {}

    def changed_files(self, base: ResolvedRevision, head: ResolvedRevision) -> list[FileChange]:
        return list(self.facts.files)


def import_map_data(path: Path | None) -> dict[str, Any] | None:
    """The JSON of a learned import map (None: there is none) for a stored universe."""
    return json.loads(path.read_text(encoding="utf-8")) if path is not None else None


def seed_import_map(universe: Universe, data: Mapping[str, Any] | None) -> Path | None:
    """Put a stored import map where this host keeps the universe's learned one
    (:func:`inventory.importmap.import_map_for` reads it there), when the host has none of
    that torch build and test files; the path written, else None."""
    keyed = map_key(universe)
    if data is None or keyed is None:
        return None
    build, files, backend_version = keyed
    folder = caches.cache_dir("selector")
    if any(folder.glob(f"importmap-{build}-{files}-*-traced.json")):
        return None
    path = folder / f"importmap-{build}-{files}-spyre{backend_version}-traced.json"
    folder.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    tmp.replace(path)
    return path


# -- which stored step a request names -------------------------------------------------


def _key(version: str) -> tuple[int | str, ...]:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"[.+]", version))


def _matches(requested: str, version: str) -> bool:
    return version == requested or version.startswith(requested + ".")


def stored_versions(folder: Path | None = None) -> list[str]:
    """Every torch version a stored run or universe names, oldest first."""
    where = folder or STORED_DIR
    names = [p.name for p in where.glob("*.json.xz")] if where.is_dir() else []
    found = {m.group(1) for n in names if (m := re.match(r"^(.+?)-(?:run\d+|universe)\.json", n))}
    return sorted(found, key=_key)


def stored_steps(folder: Path | None = None) -> list[tuple[str, str]]:
    """Every step whose input is stored, (base, head) in order of the base."""
    where = folder or STORED_DIR
    names = [p.name for p in where.glob("*_to_*-step.json.xz")] if where.is_dir() else []
    steps = [tuple(n.removesuffix("-step.json.xz").split("_to_", 1)) for n in names]
    return sorted(((b, h) for b, h in steps), key=lambda s: (_key(s[0]), _key(s[1])))


def resolve_stored(requested: str, folder: Path | None = None) -> str | None:
    """The newest stored version ``requested`` names (``2.12`` -> ``2.12.1``), else None."""
    got = [v for v in stored_versions(folder) if _matches(requested, v)]
    got += [s for step in stored_steps(folder) for s in step if _matches(requested, s)]
    return max(got, key=_key) if got else None


def input_notes(headers: Iterable[InputHeader], *, backend_version: str, suites: str) -> list[str]:
    """What the reader of a table must know about stored inputs made elsewhere: another
    backend version or suites revision than this checkout's."""
    out = []
    for h in headers:
        if h.backend_version != backend_version:
            out.append(
                f"stored input {h.name} was made with backend {h.backend_version}, "
                f"this checkout's is {backend_version}"
            )
        if h.suites != suites:
            out.append(
                f"stored input {h.name} collected the suites at {h.suites} (commit "
                f"{h.suites_commit or 'unknown'}), they are at {suites} now"
            )
    return out
