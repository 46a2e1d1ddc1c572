"""A small generated upstream repository in PyTorch's layout, and a universe for it.

Used by the stage, plan and replay tests: ``UpstreamRepo.create(tmp)`` commits a base revision;
``commit({path: text})`` makes the next one. The universe is built directly from the test
file's shape (no collection): ``TestCommon`` with two templates over four ops and two dtypes,
plus ``TestModules`` over one ModuleInfo.
"""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

from selector import Universe
from selector.model import Variant

NATIVE_FUNCTIONS = """\
- func: add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor
  structured_delegate: add.out
- func: add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)
  structured: True
  dispatch:
    CPU: add_out_kernel
- func: mul.Tensor(Tensor self, Tensor other) -> Tensor
  dispatch:
    CPU: mul_kernel
- func: gelu(Tensor self, *, str approximate='none') -> Tensor
  dispatch:
    CPU: gelu_kernel
- func: silu(Tensor self) -> Tensor
  dispatch:
    CPU: silu_kernel
"""

DERIVATIVES = """\
- name: mul.Tensor(Tensor self, Tensor other) -> Tensor
  self: grad * other
  other: grad * self
"""

DECOMPOSITIONS = textwrap.dedent("""
    from torch._decomp import register_decomposition
    from torch._ops import ops

    aten = ops.aten


    def _erf_helper(x):
        return x * 0.5


    @register_decomposition(aten.gelu)
    def gelu(self, approximate="none"):
        return self * _erf_helper(self)


    @register_decomposition([aten.silu, aten.silu.default])
    def silu(self):
        return self * self.sigmoid()
""")

OPINFO_DB = textwrap.dedent("""
    from torch.testing._internal.opinfo.core import OpInfo, UnaryUfuncInfo
    from torch.testing._internal.common_modules import ModuleInfo


    def sample_inputs_add(op, device, dtype, requires_grad):
        return [1, 2]


    def sample_inputs_mul(op, device, dtype, requires_grad):
        return [3]


    op_db = [
        OpInfo("add", sample_inputs_func=sample_inputs_add),
        OpInfo("mul", sample_inputs_func=sample_inputs_mul),
        UnaryUfuncInfo("nn.functional.gelu"),
        UnaryUfuncInfo("nn.functional.silu"),
    ]
""")

MODULES_DB = textwrap.dedent("""
    from torch.testing._internal.common_modules import ModuleInfo
    import torch


    def module_inputs_linear(module_info, device, dtype, requires_grad, training):
        return []


    module_db = [ModuleInfo(torch.nn.Linear, module_inputs_func=module_inputs_linear)]
""")

TEST_OPS = textwrap.dedent("""
    from torch.testing._internal.common_methods_invocations import op_db
    from torch.testing._internal.common_utils import TestCase


    def _helper():
        return 1


    class TestCommon(TestCase):
        def test_compare_cpu(self, device, dtype, op):
            self.assertTrue(True)

        def test_out(self, device, dtype, op):
            self.assertTrue(_helper())
""")

BINARY_OPS = "void add_out_kernel(TensorIterator& iter) { /* add */ }\nvoid mul_kernel() {}\n"

BASE_FILES = {
    "torch/__init__.py": "",
    "aten/src/ATen/native/native_functions.yaml": NATIVE_FUNCTIONS,
    "aten/src/ATen/native/BinaryOps.cpp": BINARY_OPS,
    "tools/autograd/derivatives.yaml": DERIVATIVES,
    "torch/_decomp/decompositions.py": DECOMPOSITIONS,
    "torch/testing/_internal/common_methods_invocations.py": OPINFO_DB,
    "torch/testing/_internal/common_modules.py": MODULES_DB,
    "test/test_ops.py": TEST_OPS,
    "test/test_nn.py": "def test_nothing():\n    pass\n",
    "c10/core/Device.cpp": "int device() { return 0; }\n",
    "docs/index.md": "# docs\n",
}

OPS = ("add", "mul", "nn.functional.gelu", "nn.functional.silu")
DTYPES = ("float16", "float32")
TEMPLATES = ("test_compare_cpu", "test_out")


class UpstreamRepo:
    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls, root: Path, files: dict[str, str] | None = None) -> UpstreamRepo:
        repo = cls(root / "pytorch")
        repo.path.mkdir()
        repo.git("init", "-q", "-b", "main")
        repo.git("config", "user.email", "t@example.com")
        repo.git("config", "user.name", "t")
        repo.commit(files or BASE_FILES, message="base")
        repo.git("tag", "base")
        return repo

    def git(self, *args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(self.path), *args], check=True, capture_output=True, text=True
        ).stdout

    def commit(self, files: dict[str, str | None], message: str = "change") -> str:
        for rel, text in files.items():
            p = self.path / rel
            if text is None:
                p.unlink()
                continue
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        return self.git("rev-parse", "HEAD").strip()


def variant(
    template: str,
    op: str | None,
    dtype: str | None,
    *,
    module: str | None = None,
    file: str = "test/test_ops.py",
    cls: str = "TestCommonPRIVATEUSE1",
    suite: str | None = None,
) -> Variant:
    """One variant of ``template`` (its suite: ``suite``, else the file's stem)."""
    target = (op or module or "").replace(".", "_")
    name = f"{template}_{target}_spyre_{dtype}"
    return Variant(
        test_id=f"{file}::{cls}::{name}",
        file=file,
        cls=cls,
        name=name,
        base=template,
        suite=suite or Path(file).stem,
        op=op,
        module=module,
        dtype=dtype,
    )


def make_universe() -> Universe:
    variants = [variant(t, op, d) for t in TEMPLATES for op in OPS for d in DTYPES]
    variants += [
        variant(
            "test_module_forward",
            None,
            d,
            module="nn.Linear",
            file="test/test_modules.py",
            cls="TestModulesPRIVATEUSE1",
        )
        for d in DTYPES
    ]
    return Universe(variants=variants, label="generated", kind="checkout")


class SmallUpstream:
    """What the ``small_upstream`` fixture hands a test: the generated repository, its files and
    the universe built for it."""

    UpstreamRepo = UpstreamRepo
    NATIVE_FUNCTIONS = NATIVE_FUNCTIONS
    DERIVATIVES = DERIVATIVES
    DECOMPOSITIONS = DECOMPOSITIONS
    OPINFO_DB = OPINFO_DB
    MODULES_DB = MODULES_DB
    TEST_OPS = TEST_OPS
    BINARY_OPS = BINARY_OPS
    BASE_FILES = BASE_FILES
    OPS = OPS
    DTYPES = DTYPES
    TEMPLATES = TEMPLATES
    variant = staticmethod(variant)
    make_universe = staticmethod(make_universe)
