"""The runs ``relay specs promote --runs`` reads, told apart by their content (a stored run under
any name, a plain ``{test id: outcome}`` run, compressed or not), and the flaky variants measured
between the runs of one torch."""

from __future__ import annotations

import json
import lzma
from pathlib import Path

import pytest

from evaluation.promoteruns import flaky_by_torch, read_run_input
from evaluation.storedruns import RunHeader, StoredRun, StoredRunError, write_run

A, B = (
    "spyre_stack/conformance/test_ops.py::T::test_a",
    "spyre_stack/conformance/test_ops.py::T::test_b",
)


def _stored(folder: Path, build: str, run: int, b: str) -> Path:
    header = RunHeader("2.13.0", build, "1", "bundled:x", "", "2026-12-07", run)
    outcomes = {A: "passed", B: b}
    messages = {B: "AssertionError: Tensor-likes are not close!"} if b == "failed" else {}
    return write_run(StoredRun(header=header, outcomes=outcomes, messages=messages), folder)


def test_a_run_is_read_by_its_content(tmp_path: Path) -> None:
    stored = _stored(tmp_path, "2.13.0+git0", 1, "failed")
    renamed = tmp_path / "run.bin"
    renamed.write_bytes(stored.read_bytes())
    got = read_run_input(renamed)  # the xz magic and the format, not the name
    assert got.header is not None and got.header.torch_build == "2.13.0+git0"
    assert got.messages == {B: "AssertionError: Tensor-likes are not close!"}
    plain = tmp_path / "k-baseline.json"
    plain.write_text(json.dumps({A: "passed", B: "failed"}))
    assert read_run_input(plain).header is None
    packed = tmp_path / "plain.json.xz"
    packed.write_bytes(lzma.compress(plain.read_bytes()))
    assert read_run_input(packed).outcomes == {A: "passed", B: "failed"}
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "something else", "files": {}}))
    with pytest.raises(StoredRunError, match="not a run"):
        read_run_input(bad)


def test_flaky_is_measured_per_torch(tmp_path: Path) -> None:
    first = read_run_input(_stored(tmp_path / "a", "2.13.0+git0", 1, "failed"))
    second = read_run_input(_stored(tmp_path / "b", "2.13.0+git0", 2, "passed"))
    other = read_run_input(_stored(tmp_path / "c", "2.14.1+git0", 1, "passed"))
    got = flaky_by_torch([first, second, other], [A, B])
    # 2.14.1 has one run: nothing measured; B differs between 2.13.0's runs
    assert got == {"2.13.0+git0": {"runs": 2, "variants": 2, "flaky": 1}}
