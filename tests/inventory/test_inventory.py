"""The test inventory on a small PyTorch-layout checkout built in a temp dir.

The checkout holds one upstream-style test file: a device-generic class over two OpInfos, a
``@dtypes`` test, a class restricted with ``only_for`` and a plain TestCase. Collection runs for
the CPU backend (the collection mechanics do not depend on the device); the bundled suites on
spyre are covered in tests/conformance.
"""

from __future__ import annotations

import json
import re
import subprocess
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from backends import BackendError, get_backend
from inventory.build import build_inventory, ci_file_times, specs_hash
from inventory.run import run_variants
from inventory.sources import BundledSuites, CheckoutTests, InventoryError

TEST_FILE = textwrap.dedent(
    """
    import torch
    from torch.testing._internal.common_device_type import (
        dtypes, instantiate_device_type_tests, ops,
    )
    from torch.testing._internal.common_methods_invocations import op_db
    from torch.testing._internal.common_utils import TestCase, run_tests

    tiny_ops = [op for op in op_db if op.name in ("abs", "nn.functional.relu")]


    class TestTiny(TestCase):
        @ops(tiny_ops, allowed_dtypes=(torch.float32, torch.int64))
        def test_same_shape(self, device, dtype, op):
            sample = next(iter(op.sample_inputs(device, dtype)))
            self.assertEqual(op(sample.input).shape, sample.input.shape)

        @dtypes(torch.float16, torch.float32)
        def test_zeros(self, device, dtype):
            self.assertEqual(torch.zeros(2, device=device, dtype=dtype).sum().item(), 0)


    class TestAcceleratorOnly(TestCase):
        def test_ones_sum(self, device):
            self.assertEqual(torch.ones(3, device=device).sum().item(), 3)


    class TestPlain(TestCase):
        def test_plain(self):
            self.assertTrue(True)


    instantiate_device_type_tests(TestAcceleratorOnly, globals(), only_for=("cuda",))
    instantiate_device_type_tests(TestTiny, globals())

    if __name__ == "__main__":
        run_tests()
    """
)

SPEC = textwrap.dedent(
    """
    test_suite_config:
      files:
        - path: ${TORCH_ROOT}/test/test_tiny.py
          unlisted_test_mode: skip
          tests:
            - names: [TestTiny::test_same_shape]
              tags: [smoke]
            - names: [TestTiny::test_zeros]
              mode: xfail
      global:
        supported_dtypes: [{name: float16}, {name: float32}]
    """
)


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pytorch")
    (root / "torch").mkdir()
    (root / "torch" / "version.py").write_text("__version__ = '2.99.0a0'\n")
    native = root / "aten" / "src" / "ATen" / "native"
    native.mkdir(parents=True)
    (native / "native_functions.yaml").write_text("- func: abs(Tensor self) -> Tensor\n")
    (root / "test").mkdir()
    (root / "test" / "test_tiny.py").write_text(TEST_FILE)
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "tiny")
    return root


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("inventory-cache")


@pytest.fixture(scope="module")
def times(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("stats") / "test-times.json"
    path.write_text(json.dumps({"default": {"default": {"test_tiny": 7.0, "test_ops": 9.0}}}))
    return path


@pytest.fixture(scope="module")
def inventory(checkout: Path, cache_dir: Path, times: Path):  # type: ignore[no-untyped-def]
    return build_inventory(
        CheckoutTests(checkout, ("test/test_tiny.py",)),
        backend="cpu",
        cache_dir=cache_dir,
        test_times=times,
    )


def _by_name(inv):  # type: ignore[no-untyped-def]
    return {v.name: v for v in inv.variants}


def test_every_variant_with_upstream_ids_and_metadata(inventory) -> None:  # type: ignore[no-untyped-def]
    assert inventory.errors == []
    names = _by_name(inventory)
    assert set(names) == {
        "test_same_shape_abs_cpu_float32",
        "test_same_shape_abs_cpu_int64",
        "test_same_shape_nn_functional_relu_cpu_float32",
        "test_same_shape_nn_functional_relu_cpu_int64",
        "test_zeros_cpu_float16",
        "test_zeros_cpu_float32",
        "test_plain",
    }
    relu = names["test_same_shape_nn_functional_relu_cpu_int64"]
    assert relu.test_id == (
        "test/test_tiny.py::TestTinyCPU::test_same_shape_nn_functional_relu_cpu_int64"
    )
    assert (relu.file, relu.cls, relu.base) == (
        "test/test_tiny.py",
        "TestTinyCPU",
        "test_same_shape",
    )
    assert (relu.op, relu.dtype, relu.module) == ("nn.functional.relu", "int64", None)
    assert relu.suite == "test_tiny"
    zeros = names["test_zeros_cpu_float16"]
    assert (zeros.base, zeros.op, zeros.dtype) == ("test_zeros", None, "float16")
    plain = names["test_plain"]
    assert (plain.cls, plain.base, plain.op, plain.dtype) == ("TestPlain", "test_plain", None, None)


def test_only_for_class_is_reported_not_collected(inventory) -> None:  # type: ignore[no-untyped-def]
    assert not [v for v in inventory.variants if "ones_sum" in v.name]
    assert [(r["cls"], r["only_for"], r["tests"]) for r in inventory.restricted] == [
        ("TestAcceleratorOnly", ["cuda"], 1)
    ]


def test_ci_file_prior_spreads_file_time_over_its_variants(inventory) -> None:  # type: ignore[no-untyped-def]
    assert {v.duration_source for v in inventory.variants} == {"pytorch-ci-file-prior"}
    assert sum(v.duration for v in inventory.variants) == pytest.approx(7.0)


def test_history_wins_over_the_prior(checkout: Path, cache_dir: Path, times: Path) -> None:
    test_id = "test/test_tiny.py::TestPlain::test_plain"
    inv = build_inventory(
        CheckoutTests(checkout, ("test/test_tiny.py",)),
        backend="cpu",
        cache_dir=cache_dir,
        test_times=times,
        history={test_id: 0.25},
    )
    assert inv.cached
    plain = _by_name(inv)["test_plain"]
    assert (plain.duration, plain.duration_source) == (0.25, "history")
    others = [v for v in inv.variants if v.name != "test_plain"]
    assert {v.duration_source for v in others} == {"pytorch-ci-file-prior"}


def test_cache_is_reused_and_keyed_by_specs(
    checkout: Path, cache_dir: Path, times: Path, tmp_path: Path, inventory
) -> None:  # type: ignore[no-untyped-def]
    source = CheckoutTests(checkout, ("test/test_tiny.py",))
    again = build_inventory(source, backend="cpu", cache_dir=cache_dir, test_times=times)
    assert again.cached and again.key == inventory.key
    assert [v.test_id for v in again.variants] == [v.test_id for v in inventory.variants]
    assert {v.decision for v in again.variants} == {None}

    spec = tmp_path / "tiny.yaml"
    spec.write_text(SPEC)
    with_spec = build_inventory(
        source, backend="cpu", specs=[spec], cache_dir=cache_dir, test_times=times
    )
    assert with_spec.cached, "a spec change re-resolves decisions, it does not re-collect"
    assert with_spec.key.specs_hash == specs_hash([spec]) != inventory.key.specs_hash
    # the specs' content, not where the checkout is: the same folder elsewhere hashes the same
    for where in ("a", "b"):
        (tmp_path / where / "specs" / "sub").mkdir(parents=True)
        (tmp_path / where / "specs" / "sub" / "tiny.yaml").write_text(SPEC)
    same = [specs_hash([tmp_path / w / "specs"]) for w in ("a", "b")]
    assert same[0] == same[1] != "none"
    (tmp_path / "b" / "specs" / "sub" / "tiny.yaml").rename(tmp_path / "b" / "specs" / "tiny.yaml")
    assert specs_hash([tmp_path / "b" / "specs"]) != same[0]  # a file's place in the folder counts
    decided = {v.name: (v.decision, tuple(v.tags)) for v in with_spec.variants}
    assert decided["test_same_shape_abs_cpu_float32"] == ("mandatory_success", ("smoke",))
    # int64 is outside global.supported_dtypes: not generated on the device
    assert decided["test_same_shape_abs_cpu_int64"][0] == "skip"
    assert decided["test_zeros_cpu_float16"][0] == "xfail"
    assert decided["test_plain"][0] == "skip"  # unlisted -> the file's unlisted_test_mode


def test_changed_test_file_recollects(checkout: Path, tmp_path: Path, times: Path) -> None:
    cache = tmp_path / "cache"
    root = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(checkout), str(root)], check=True)
    source = CheckoutTests(root, ("test/test_tiny.py",))
    first = build_inventory(source, backend="cpu", cache_dir=cache, test_times=times)
    assert not first.cached
    path = root / "test" / "test_tiny.py"
    path.write_text(path.read_text().replace("torch.float16, torch.float32", "torch.float16"))
    second = build_inventory(source, backend="cpu", cache_dir=cache, test_times=times)
    assert not second.cached and second.key.revision != first.key.revision
    assert "test_zeros_cpu_float32" not in _by_name(second)
    assert len(second.variants) == len(first.variants) - 1


def test_only_for_class_is_collected_and_run_through_the_wrapper_on_spyre(
    checkout: Path, tmp_path: Path
) -> None:
    inv = build_inventory(
        CheckoutTests(checkout, ("test/test_tiny.py",)), backend="spyre", cache_dir=tmp_path
    )
    assert inv.errors == []
    wrapped = [v for v in inv.variants if v.via]
    assert [(v.test_id, v.file, v.base) for v in wrapped] == [
        (
            "test/test_tiny.py::TestAcceleratorOnlyPRIVATEUSE1::test_ones_sum_spyre",
            "test/test_tiny.py",
            "test_ones_sum",
        )
    ]
    assert Path(wrapped[0].via).is_file()
    assert inv.restricted == []
    direct = _by_name(inv)["test_same_shape_abs_spyre_float32"]
    assert direct.cls == "TestTinyPRIVATEUSE1" and direct.via is None
    results = run_variants([*wrapped, direct], root=checkout, backend="spyre")
    assert {r.test_id: r.outcome for r in results} == {
        wrapped[0].test_id: "passed",
        direct.test_id: "passed",
    }


# upstream's PrivateUse1TestBase.setUpClass renames the device type on the base class while the
# first class is instantiated; SpyreTestBase pins it back, so a restricted class instantiated
# after another device-generic class is still named ...PRIVATEUSE1 and the wrapper finds it
def test_wrapper_after_another_device_generic_class(checkout: Path, tmp_path: Path) -> None:
    root = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(checkout), str(root)], check=True)
    path = root / "test" / "test_tiny.py"
    lines = path.read_text().splitlines()
    first = next(i for i, ln in enumerate(lines) if ln.startswith("instantiate_device_type_tests"))
    lines[first], lines[first + 1] = lines[first + 1], lines[first]
    path.write_text("\n".join(lines) + "\n")
    inv = build_inventory(
        CheckoutTests(root, ("test/test_tiny.py",)), backend="spyre", cache_dir=tmp_path / "c"
    )
    assert [v.cls for v in inv.variants if v.via] == ["TestAcceleratorOnlyPRIVATEUSE1"]


def test_errors_are_clear(tmp_path: Path, checkout: Path) -> None:
    with pytest.raises(InventoryError, match="not a PyTorch checkout"):
        CheckoutTests(tmp_path, ("test/test_tiny.py",))
    with pytest.raises(InventoryError, match="no such test file"):
        CheckoutTests(checkout, ("test/test_nothing.py",))
    with pytest.raises(InventoryError, match="unknown suite"):
        BundledSuites(("nope",)).files()
    with pytest.raises(BackendError, match="no installed backend"):
        get_backend("tpu")


def test_ci_file_times_fallbacks(times: Path, tmp_path: Path) -> None:
    assert ci_file_times(times, job="some-job-we-do-not-know")["test_tiny"] == 7.0
    assert ci_file_times(tmp_path / "missing.json") == {}


def test_cli_list_and_count_on_a_checkout(
    checkout: Path, cache_dir: Path, times: Path, inventory
) -> None:  # type: ignore[no-untyped-def]
    from cli import build_app

    common = ["--backend", "cpu", "--upstream", str(checkout), "--file", "test/test_tiny.py"]
    common += ["--cache-dir", str(cache_dir), "--test-times", str(times)]
    runner = CliRunner()
    listed = runner.invoke(build_app(), ["tests", "list", *common, "--json"])
    assert listed.exit_code == 0, listed.output
    rows = [json.loads(line) for line in listed.output.splitlines()]
    assert {r["test_id"] for r in rows} == {v.test_id for v in inventory.variants}

    counted = runner.invoke(build_app(), ["tests", "count", *common, "--json"])
    assert counted.exit_code == 0, counted.output
    data = json.loads(counted.output)
    assert data["total"] == 7
    assert data["by_dtype"] == {"float32": 3, "int64": 2, "float16": 1, "-": 1}
    assert data["by_op"] == {"abs": 2, "nn.functional.relu": 2}
    assert data["restricted"][0]["cls"] == "TestAcceleratorOnly"

    text = runner.invoke(build_app(), ["tests", "count", *common])
    assert "7 cpu variants" in text.output and "TestAcceleratorOnly" in text.output

    bad = runner.invoke(build_app(), ["tests", "count", "--file", "test/test_tiny.py"])
    assert bad.exit_code == 2 and "--file needs --upstream" in bad.output


def test_cli_count_on_a_cold_cache_says_how_far_the_collection_is(
    checkout: Path, times: Path, tmp_path: Path
) -> None:
    from cli import build_app

    common = ["--backend", "cpu", "--upstream", str(checkout), "--file", "test/test_tiny.py"]
    common += ["--cache-dir", str(tmp_path / "cold"), "--test-times", str(times), "--json"]
    cold = CliRunner().invoke(build_app(), ["tests", "count", *common])
    assert cold.exit_code == 0, cold.output
    assert json.loads(cold.stdout)["total"] == 7
    # stderr is not a terminal here: a line when collection starts, one where it ended
    first, last = cold.stderr.splitlines()
    assert first == "collecting the test files: 0 of 1 files (0 %), 0 s elapsed"
    assert re.fullmatch(
        r"collecting the test files: 1 of 1 files \(100 %\), \d+ s elapsed, [\d.]+ files/s", last
    ), last
    warm = CliRunner().invoke(build_app(), ["tests", "count", *common])
    assert warm.exit_code == 0 and warm.stderr == ""  # from the cache: nothing to wait for
