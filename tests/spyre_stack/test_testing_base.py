"""SpyreTestBase, its subclass hook, and the pytest plugin's environment."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

DEVICE_FILE = """
import unittest
import spyre_stack
from spyre_stack.testing.base import SpyreTestBase, replace_generic_base

spyre_stack.register()


class NoFloat32(SpyreTestBase):
    @classmethod
    def spyre_variant_added(cls, variant_name, test_fn):
        if variant_name.endswith("float32"):
            return unittest.skip("float32 is down-cast on spyre")(test_fn)
        return None


TEST_CLASS = replace_generic_base(NoFloat32, globals())
"""

MODULE = """
import torch
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase


class TestTiny(TestCase):
    @dtypes(torch.float16, torch.float32)
    def test_ones(self, device, dtype):
        x = torch.ones(3, device=device, dtype=dtype)
        self.assertEqual(x.device.type, "spyre")
        self.assertEqual(x.sum().item(), 3)


instantiate_device_type_tests(TestTiny, globals())
"""


def run_pytest(
    tmp_path: Path, *args: str, env: dict[str, str], repo_root: Path, modules: int = 1
) -> subprocess.CompletedProcess[str]:
    import os

    files = []
    for i in range(modules):
        name = f"test_tiny{i or ''}.py"
        (tmp_path / name).write_text(MODULE.replace("TestTiny", f"TestTiny{i or ''}"))
        files.append(str(tmp_path / name))
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-rs",
            "-p",
            "no:cacheprovider",
            *args,
            *files,
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(repo_root), "SPYRE_SILENCE_DOWNCAST_WARNING": "1",
             **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_plugin_instantiates_privateuse1_classes_on_spyre(tmp_path: Path, repo_root: Path) -> None:
    proc = run_pytest(tmp_path, "-p", "spyre_stack.testing.pytest_plugin", "-v", env={}, repo_root=repo_root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "TestTinyPRIVATEUSE1::test_ones_spyre_float16 PASSED" in proc.stdout
    assert "TestTinyPRIVATEUSE1::test_ones_spyre_float32 PASSED" in proc.stdout
    assert "TestTinyCPU" not in proc.stdout


def test_subclass_hook_decorates_variants(tmp_path: Path, repo_root: Path) -> None:
    device_file = tmp_path / "no_float32_base.py"
    device_file.write_text(DEVICE_FILE)
    proc = run_pytest(
        tmp_path,
        "-p",
        "spyre_stack.testing.pytest_plugin",
        "-v",
        env={"TORCH_TEST_DEVICES": str(device_file)},
        repo_root=repo_root,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "test_ones_spyre_float16 PASSED" in proc.stdout
    assert "test_ones_spyre_float32 SKIPPED" in proc.stdout
    assert "float32 is down-cast on spyre" in proc.stdout
    assert proc.stdout.count("TestTinyPRIVATEUSE1::test_ones_spyre_float16") == 1


def test_class_names_do_not_depend_on_collection_order(tmp_path: Path, repo_root: Path) -> None:
    # upstream renames the base's device_type while instantiating the first module; the second
    # module collected in the same interpreter must still get ...PRIVATEUSE1 classes
    proc = run_pytest(tmp_path, "-p", "spyre_stack.testing.pytest_plugin", "-v", env={}, repo_root=repo_root, modules=2)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "TestTinyPRIVATEUSE1::test_ones_spyre_float16 PASSED" in proc.stdout
    assert "TestTiny1PRIVATEUSE1::test_ones_spyre_float16 PASSED" in proc.stdout
    assert "SPYRE::" not in proc.stdout
