"""Authoring helpers: a skeleton spec for a test file, and mode proposals from run results.

``propose_updates`` never writes a spec: it returns a unified diff for a human to review and apply
(``git apply``). Edits are made on the text, at the lines the loader recorded, so comments and
formatting survive.
"""

from __future__ import annotations

import difflib
import json
from collections import defaultdict
from pathlib import Path

from testspecs.collect import collect_file
from testspecs.compiled import compile_spec
from testspecs.errors import SpecError
from testspecs.loader import LoadedSpec, load_files, load_text
from testspecs.models import FileEntry, TestEntry
from testspecs.report import TestRecord, read_report
from testspecs.vocabulary import EXTENSION_KEY, MODES


def new_skeleton(
    test_file: str | Path,
    *,
    tests_root: str | Path | None = None,
    device_root: str | Path | None = None,
) -> str:
    """A spec listing every device-generic test of ``test_file``, each with a mode to fill in;
    its path is relative to ``device_root`` (``${TORCH_DEVICE_ROOT}``, a backend's own tests)
    or ``tests_root`` (``${TORCH_ROOT}``, an upstream checkout), else ``test/<name>``."""
    p = Path(test_file)
    tests = collect_file(p)
    token = "${TORCH_DEVICE_ROOT}" if device_root is not None else "${TORCH_ROOT}"
    root = device_root if device_root is not None else tests_root
    if root is not None:
        rel = p.resolve().relative_to(Path(root).resolve()).as_posix()
    else:
        rel = f"test/{p.name}"
    lines = [
        f"# Spec for {rel}: set each mode to one of {' | '.join(MODES)}.",
        "test_suite_config:",
        "  files:",
        f"    - path: {token}/{rel}",
        "      unlisted_test_mode: skip",
    ]
    if tests:
        lines.append("      tests:")
    for t in tests:
        lines += [
            f"        - names: [{t.name}]",
            "          mode: xfail  # TODO: decide (mandatory_success | xfail | xfail_strict | skip)",
        ]
    if not tests:
        lines.append(
            "      # no device-generic tests found (no instantiate_device_type_tests call)"
        )
    return "\n".join(lines) + "\n"


def _first_line(text: str | None) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()[:200]
    return "failed"


def propose(
    records_per_run: list[list[TestRecord]], *, min_passes: int = 2
) -> list[tuple[str | None, str, str, str]]:
    """(test_file, base, new_mode, reason) proposals from one or more runs."""
    failed: dict[tuple[str | None, str], str] = {}
    xpass_runs: dict[tuple[str | None, str], int] = defaultdict(int)
    not_passing: set[tuple[str | None, str]] = set()
    for records in records_per_run:
        passed_here: set[tuple[str | None, str]] = set()
        for r in records:
            if not r.base:
                continue
            key = (r.test_file, r.base)
            if r.mode == "mandatory_success" and r.outcome in ("failed", "error"):
                failed.setdefault(key, _first_line(r.message))
            if r.mode == "xfail":
                if r.outcome == "xpassed":
                    passed_here.add(key)
                else:
                    not_passing.add(key)
        for key in passed_here:
            xpass_runs[key] += 1
    out = [(f, b, "xfail", reason) for (f, b), reason in failed.items()]
    for key, n in xpass_runs.items():
        if n >= min_passes and key not in not_passing:
            out.append((key[0], key[1], "mandatory_success", f"passed in {n} runs"))
    return sorted(out, key=lambda p: (p[0] or "", p[1]))


class _TextEdits:
    def __init__(self, spec: LoadedSpec) -> None:
        self.spec = spec
        self.lines = Path(spec.file).read_text().splitlines()
        self.inserts: dict[int, list[str]] = defaultdict(list)  # before 0-based line
        self.replacements: dict[int, str] = {}

    def result(self) -> list[str]:
        out: list[str] = []
        for i, line in enumerate(self.lines):
            out += self.inserts.get(i, [])
            out.append(self.replacements.get(i, line))
        out += self.inserts.get(len(self.lines), [])
        return out


def _reason_line(indent: int, reason: str) -> str:
    return " " * indent + f"{EXTENSION_KEY}: {{reason: {json.dumps(reason)}}}"


def _edit(
    ed: _TextEdits,
    fi: int,
    file: FileEntry,
    entry: TestEntry | None,
    ti: int | None,
    base: str,
    mode: str,
    reason: str,
) -> None:
    locs = ed.spec.value_locs
    if entry is not None and entry.loc is not None and ti is not None:
        path = ("test_suite_config", "files", fi, "tests", ti)
        col = entry.loc.column - 1
        start = entry.loc.line - 1
        block = ed.lines[start][col:].startswith("names:")
        if block and entry.names == [base]:
            last_name = locs.get((*path, "names", len(entry.names) - 1))
            mode_loc = locs.get((*path, "mode"))
            if mode_loc is not None:
                i = mode_loc.line - 1
                ed.replacements[i] = " " * col + f"mode: {mode}"
            elif last_name is not None:
                ed.inserts[last_name.line].append(" " * col + f"mode: {mode}")
            anchor = mode_loc.line if mode_loc else last_name.line if last_name else start + 1
            if entry.ext is None:
                ed.inserts[anchor].append(_reason_line(col, reason))
            return
        # a shared or flow-style entry: a new entry before it wins rule 4 ("the first")
        ed.inserts[start] += [
            " " * (col - 2) + f"- names: [{json.dumps(base)}]",
            " " * col + f"mode: {mode}",
            _reason_line(col, reason),
        ]
        return
    # unlisted: add an entry to the file's tests
    if file.tests and file.tests[0].loc is not None:
        first = file.tests[0].loc
        col = first.column - 1
        ed.inserts[first.line - 1] += [
            " " * (col - 2) + f"- names: [{json.dumps(base)}]",
            " " * col + f"mode: {mode}",
            _reason_line(col, reason),
        ]
    elif file.loc is not None and "tests" not in file.model_fields_set:
        col = file.loc.column - 1
        path_loc = locs.get(("test_suite_config", "files", fi, "path"))
        after = path_loc.line if path_loc else file.loc.line
        ed.inserts[after] += [
            " " * col + "tests:",
            " " * (col + 2) + f"- names: [{json.dumps(base)}]",
            " " * (col + 4) + f"mode: {mode}",
            _reason_line(col + 4, reason),
        ]


def propose_updates(
    report_paths: list[str | Path], spec_paths: list[str | Path], *, min_passes: int = 2
) -> str:
    """A unified diff of the proposed mode changes (empty when there is nothing to propose)."""
    runs = [read_report(p) for p in report_paths]
    proposals = propose(runs, min_passes=min_passes)
    specs = load_files(spec_paths)
    edits: dict[str, _TextEdits] = {}
    for test_file, base, mode, reason in proposals:
        cls, _, method = base.rpartition("::")
        for spec in specs:
            cs = compile_spec(spec.document)
            files = cs.files_for(test_file)
            if not files:
                continue
            cf = files[0]
            fi = next(i for i, f in enumerate(spec.document.files) if f is cf.file)
            hits = cs.lookup(files, cls or None, method)
            ed = edits.setdefault(spec.file, _TextEdits(spec))
            if hits:
                ce = hits[0]
                if ce.entry.effective_mode == mode:
                    continue
                _edit(ed, fi, cf.file, ce.entry, ce.index, base, mode, reason)
            elif cf.file.unlisted_test_mode != mode:
                _edit(ed, fi, cf.file, None, None, base, mode, reason)
            break
    chunks = []
    for file, ed in sorted(edits.items()):
        new = ed.result()
        if new == ed.lines:
            continue
        try:
            load_text("\n".join(new) + "\n", file)
        except SpecError as e:  # never propose a broken spec
            chunks.append(
                f"# {file}: could not express the proposal safely:\n# "
                + "\n# ".join(e.messages)
                + "\n"
            )
            continue
        rel = file.lstrip("/")
        diff = difflib.unified_diff(
            [line + "\n" for line in ed.lines],
            [line + "\n" for line in new],
            fromfile=f"a/{rel}",
            tofile=f"b/{rel}",
        )
        chunks.append("".join(diff))
    return "".join(chunks)
