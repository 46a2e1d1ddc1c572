"""Work that starts processes, run where the planner runs it: in the pool child of a real Celery
worker (prefork, the embedded broker), on a cold cache (a fresh directory, a fresh RELAY_VAR_DIR).

A prefork child is a daemonic process, which may not start a ``multiprocessing`` pool; the
release planner's change facts once did and the demo replay failed in 8 s with 0 tests. Every
piece of planning work that starts processes runs here: the change facts (parser children; the
same facts as a serial computation in the test process), the behaviour fingerprints, the
inventory collection and the import map (pytest subprocesses)."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest

from upstream.changes import compute_change_facts
from upstream.git import GitCheckout

#: over upstream.changes.facts.PARALLEL_MIN_FILES: the facts go to parser children
MODULES = 80

TINY_TEST = textwrap.dedent(
    """
    import torch
    from torch.testing._internal.common_device_type import instantiate_device_type_tests, dtypes
    from torch.testing._internal.common_utils import TestCase, run_tests


    class TestTiny(TestCase):
        @dtypes(torch.float32, torch.float16)
        def test_zeros(self, device, dtype):
            self.assertEqual(torch.zeros(2, device=device, dtype=dtype).sum().item(), 0)

        def test_ones_sum(self, device):
            self.assertEqual(torch.ones(3, device=device).sum().item(), 3)


    instantiate_device_type_tests(TestTiny, globals())

    if __name__ == "__main__":
        run_tests()
    """
)


def _git(root: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True,
        capture_output=True,
    )


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git checkout whose second commit changes, adds and removes many Python modules (the
    facts go to parser children) and carries a small device-generic test file."""
    root = tmp_path_factory.mktemp("upstream")
    pkg = root / "torch" / "_gen"
    pkg.mkdir(parents=True)
    (root / "torch" / "__init__.py").write_text("")
    native = root / "aten" / "src" / "ATen" / "native"
    native.mkdir(parents=True)
    (native / "native_functions.yaml").write_text("- func: abs(Tensor self) -> Tensor\n")
    for i in range(MODULES):
        (pkg / f"m{i}.py").write_text(
            f"def f{i}(x):\n    return x + {i}\n\nclass C{i}:\n    pass\n"
        )
    (root / "test").mkdir()
    (root / "test" / "test_tiny.py").write_text(TINY_TEST)
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "base")
    _git(root, "tag", "base")
    for i in range(MODULES):
        if i % 10 == 0:
            (pkg / f"m{i}.py").unlink()
        elif i % 2:
            (pkg / f"m{i}.py").write_text(
                f"def f{i}(x):\n    return x * {i}\n\nclass C{i}:\n    pass\n"
            )
        else:
            (pkg / f"m{i}.py").write_text(
                f"def f{i}(x):\n    return x + {i}\n\nclass C{i}:\n    y = {i}\n"
            )
    (pkg / "broken.py").write_text("def broken(:\n")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "head")
    _git(root, "tag", "head")
    return root


def _result(answer: dict[str, Any]) -> Any:
    assert "error" not in answer, answer["error"]
    # the call ran in the pool child Celery made: a daemonic process, where a multiprocessing
    # pool cannot start (this test would prove nothing elsewhere)
    assert answer["daemon"] is True
    return answer["result"]


def test_change_facts_in_a_prefork_child(
    prefork_worker: Any, checkout: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cold"
    facts = _result(
        prefork_worker.call(
            "change_facts_in_child",
            checkout=str(checkout),
            base="base",
            head="head",
            cache_dir=str(cache),
        )
    )
    assert list((cache / "facts").glob("*.json"))  # computed, then cached
    by_path = {p["path"]: p for p in facts["python"]}
    assert len(by_path) == MODULES + 1
    assert by_path["torch/_gen/m1.py"]["symbols"] == [
        {"qualname": "f1", "kind": "function", "status": "modified"}
    ]
    assert by_path["torch/_gen/m2.py"]["symbols"] == [
        {"qualname": "C2", "kind": "class", "status": "modified"}
    ]
    assert by_path["torch/_gen/m10.py"]["status"] == "removed"
    assert by_path["torch/_gen/broken.py"]["parse_error"].startswith("head: SyntaxError")
    # the same facts as one process computes them in the test process, serially
    source = GitCheckout(checkout)
    serial = compute_change_facts(source, source.resolve("base"), source.resolve("head"), workers=1)
    assert facts["python"] == [p.model_dump(mode="json") for p in serial.python]


def test_fingerprints_in_a_prefork_child(prefork_worker: Any, tmp_path: Path) -> None:
    result = _result(
        prefork_worker.call("fingerprints_in_child", cache_dir=str(tmp_path / "cold"), only=["abs"])
    )
    assert set(result["entries"]) == {"abs"}
    f32 = result["entries"]["abs"]["by_dtype"]["float32"]
    assert f32["n"] > 0 and "aten.abs.default" in f32["fwd"]
    assert list((tmp_path / "cold" / "fingerprints").glob("*.json"))


def test_inventory_collection_in_a_prefork_child(
    prefork_worker: Any, checkout: Path, tmp_path: Path
) -> None:
    ids = _result(
        prefork_worker.call(
            "inventory_in_child",
            checkout=str(checkout),
            files=["test/test_tiny.py"],
            cache_dir=str(tmp_path / "cold"),
        )
    )
    assert ids == [
        "test/test_tiny.py::TestTinyCPU::test_ones_sum_cpu",
        "test/test_tiny.py::TestTinyCPU::test_zeros_cpu_float16",
        "test/test_tiny.py::TestTinyCPU::test_zeros_cpu_float32",
    ]


def test_import_map_learning_in_a_prefork_child(
    prefork_worker: Any, checkout: Path, tmp_path: Path
) -> None:
    learned = _result(
        prefork_worker.call(
            "import_map_in_child",
            checkout=str(checkout),
            files=["test/test_tiny.py"],
            cache_dir=str(tmp_path / "cold"),
        )
    )
    assert (learned["key"], learned["tests_run"]) == ("tiny", 3)  # the sample ran
    assert "torch/__init__.py" in learned["modules"]  # the torch files the sample loaded
    assert "torch/testing/_internal/common_device_type.py" in learned["modules"]
    assert list((tmp_path / "cold" / "selector").glob("importmap-tiny.json"))
