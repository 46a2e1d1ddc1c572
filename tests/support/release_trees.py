"""Small PyTorch-layout trees for the upstream-source tests, as git repositories and wheels.

BASE is "2.13", HEAD is "2.14": HEAD differs from BASE in known ways (listed in EXPECTED_*),
so the tests can check every kind of change fact against what was actually written here.
"""

from __future__ import annotations

import os
import subprocess
import zipfile
from pathlib import Path

NATIVE = "aten/src/ATen/native/native_functions.yaml"
DERIVATIVES = "tools/autograd/derivatives.yaml"
CMI = "torch/testing/_internal/common_methods_invocations.py"
MODULES = "torch/testing/_internal/common_modules.py"
LINALG = "torch/testing/_internal/opinfo/definitions/linalg.py"
CORE = "torch/testing/_internal/opinfo/core.py"

_CORE = '''\
class OpInfo:
    def __init__(self, name, **kwargs):
        self.name = name


class UnaryUfuncInfo(OpInfo):
    pass


class BinaryUfuncInfo(OpInfo):
    pass


class DecorateInfo:
    def __init__(self, *args, **kwargs):
        self.args = args


def reference_inputs_elementwise(op, device, dtype):
    return []
'''

_CMI_BASE = '''\
from torch.testing._internal.opinfo.core import (
    BinaryUfuncInfo, DecorateInfo, OpInfo, UnaryUfuncInfo, reference_inputs_elementwise,
)


def _shapes():
    return [(2, 3), (4,)]


def sample_inputs_add(op, device, dtype):
    return [("add", s) for s in _shapes()]


def sample_inputs_relu(op, device, dtype):
    return [("relu", s) for s in _shapes()]


def sample_inputs_mul(op, device, dtype):
    return [("mul", (3,))]


def sample_inputs_gelu(op, device, dtype):
    return []


op_db = [
    BinaryUfuncInfo('add', dtypes=('float32',), sample_inputs_func=sample_inputs_add,
                    reference_inputs_func=reference_inputs_elementwise),
    UnaryUfuncInfo('relu', sample_inputs_func=sample_inputs_relu),
    OpInfo('mul', sample_inputs_func=sample_inputs_mul,
           skips=(DecorateInfo('skip', 'TestCommon', 'test_out'),)),
    OpInfo('mul', variant_test_name='scalar', sample_inputs_func=sample_inputs_mul),
    OpInfo('gelu', sample_inputs_func=sample_inputs_gelu),
]
'''

# add: dtypes changed (own definition); relu: changed through the _shapes helper of its
# sample_inputs function; gelu: removed; silu: added; mul entries: formatting only.
_CMI_HEAD = '''\
from torch.testing._internal.opinfo.core import (
    BinaryUfuncInfo, DecorateInfo, OpInfo, UnaryUfuncInfo, reference_inputs_elementwise,
)


def _shapes():
    return [(2, 3), (4,), (0,)]


def sample_inputs_add(op, device, dtype):
    return [("add", s) for s in _shapes()]


def sample_inputs_relu(op, device, dtype):
    return [("relu", s) for s in _shapes()]


def sample_inputs_mul(op, device, dtype):
    # a comment does not change anything
    return [("mul", (3, ))]


def sample_inputs_silu(op, device, dtype):
    return [("silu", (5,))]


op_db = [
    BinaryUfuncInfo('add', dtypes=('float32', 'float16'), sample_inputs_func=sample_inputs_add,
                    reference_inputs_func=reference_inputs_elementwise),
    UnaryUfuncInfo('relu', sample_inputs_func=sample_inputs_relu),
    OpInfo(
        'mul',
        sample_inputs_func=sample_inputs_mul,
        skips=(DecorateInfo('skip', 'TestCommon', 'test_out'),),
    ),
    OpInfo('mul', variant_test_name='scalar', sample_inputs_func=sample_inputs_mul),
    UnaryUfuncInfo('silu', sample_inputs_func=sample_inputs_silu),
]
'''

_LINALG_BASE = '''\
from torch.testing._internal.opinfo.core import OpInfo


def sample_inputs_norm(op, device, dtype):
    return [(3, 3)]


op_db = [OpInfo('linalg.norm', sample_inputs_func=sample_inputs_norm)]
'''

_MODULES_BASE = '''\
import torch
from torch.testing._internal.common_methods_invocations import DecorateInfo


class ModuleInfo:
    def __init__(self, module_cls, **kwargs):
        self.module_cls = module_cls


def module_inputs_torch_nn_Linear(module_info, device, dtype):
    return [(10, 8)]


def module_inputs_torch_nn_ReLU(module_info, device, dtype):
    return [(4,)]


module_db = [
    ModuleInfo(torch.nn.Linear, module_inputs_func=module_inputs_torch_nn_Linear),
    ModuleInfo(torch.nn.ReLU, module_inputs_func=module_inputs_torch_nn_ReLU),
]
'''

_FUNCTIONAL_BASE = '''\
def relu(x):
    return max(x, 0)


def gelu(x):
    return x


def old_fn():
    return 1


class Thing:
    size = 3

    def method(self):
        return self.size

    def other(self):
        return 0
'''

_FUNCTIONAL_HEAD = '''\
def relu(x):
    return max(x, 0.0)


def gelu(x):
    """Now with a docstring, which is not a behaviour change."""
    return x


def silu(x):
    return x


class Thing:
    size = 3

    def method(self):
        return self.size + 1

    def other(self):
        return 0
'''

_NATIVE_BASE = '''\
- func: add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor
  dispatch:
    CPU, CUDA: add
- func: mul.Tensor(Tensor self, Tensor other) -> Tensor
  dispatch:
    CPU, CUDA: mul
- func: relu(Tensor self) -> Tensor
  dispatch:
    CPU: relu
- func: gelu(Tensor self) -> Tensor
'''

_NATIVE_HEAD = '''\
# formatting of add.Tensor changes, its content does not
- func: "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"
  dispatch: {"CPU, CUDA": add}
- func: mul.Tensor(Tensor self, Tensor other) -> Tensor
  dispatch:
    CPU, CUDA: mul
    PrivateUse1: mul_privateuse1
- func: relu(Tensor self) -> Tensor
  dispatch:
    CPU: relu
- func: silu(Tensor self) -> Tensor
'''

_DERIV_BASE = '''\
- name: add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor
  self: grad
  other: grad * alpha
- name: relu(Tensor self) -> Tensor
  self: threshold_backward(grad, result, 0)
'''

_DERIV_HEAD = '''\
- name: add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor
  self: grad
  other: grad * alpha
- name: relu(Tensor self) -> Tensor
  self: threshold_backward(grad, result, 0.0)
'''

_TEST_OPS_BASE = '''\
class TestCommon:
    def test_a(self):
        pass

    def test_b(self):
        assert 1
'''

_TEST_OPS_HEAD = '''\
class TestCommon:
    def test_a(self):
        pass

    def test_b(self):
        assert 2

    def test_c(self):
        pass
'''

BASE: dict[str, str] = {
    "torch/__init__.py": "def version():\n    return 'base'\n",
    "torch/nn/functional.py": _FUNCTIONAL_BASE,
    "torch/old.py": "X = 1\n",
    CORE: _CORE,
    CMI: _CMI_BASE,
    LINALG: _LINALG_BASE,
    MODULES: _MODULES_BASE,
    NATIVE: _NATIVE_BASE,
    DERIVATIVES: _DERIV_BASE,
    "test/test_ops.py": _TEST_OPS_BASE,
    "c10/core/Device.h": "// device\n",
}

HEAD: dict[str, str] = {
    **{k: v for k, v in BASE.items() if k != "torch/old.py"},
    # formatting only: a comment and different line breaks
    "torch/__init__.py": "# comment\ndef version(\n):\n    return (\n        'base'\n    )\n",
    "torch/nn/functional.py": _FUNCTIONAL_HEAD,
    "torch/new_module.py": "def fresh():\n    return 1\n",
    "torch/broken.py": "def broken(:\n",
    CMI: _CMI_HEAD,
    LINALG: _LINALG_BASE.replace("[(3, 3)]", "[(3, 3), (2, 5)]"),
    MODULES: _MODULES_BASE.replace(
        "    ModuleInfo(torch.nn.ReLU, module_inputs_func=module_inputs_torch_nn_ReLU),\n", ""),
    NATIVE: _NATIVE_HEAD,
    DERIVATIVES: _DERIV_HEAD,
    "test/test_ops.py": _TEST_OPS_HEAD,
    "c10/core/Device.h": "// device, changed\n",
}

EXPECTED_FILES = {
    "torch/__init__.py": "modified",
    "torch/nn/functional.py": "modified",
    "torch/old.py": "removed",
    "torch/new_module.py": "added",
    "torch/broken.py": "added",
    CMI: "modified",
    LINALG: "modified",
    MODULES: "modified",
    NATIVE: "modified",
    DERIVATIVES: "modified",
    "test/test_ops.py": "modified",
    "c10/core/Device.h": "modified",
}


def write_tree(root: Path, files: dict[str, str]) -> None:
    for path, text in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


def git(root: Path, *args: str) -> str:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
        "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid",
        "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
    }
    proc = subprocess.run(["git", "-C", str(root), *args], env=env, capture_output=True,
                          text=True, check=True)
    return proc.stdout.strip()


def make_checkout(root: Path) -> Path:
    """A git repository: main with tag v2.13.0 (BASE), release/2.14 and v2.14.0 (HEAD),
    viable/strict pointing at BASE."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    write_tree(root, BASE)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    git(root, "tag", "v2.13.0")
    git(root, "branch", "viable/strict")
    git(root, "checkout", "-q", "-b", "release/2.14")
    for path in set(BASE) - set(HEAD):
        (root / path).unlink()
    write_tree(root, HEAD)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "head")
    git(root, "tag", "v2.14.0")
    git(root, "checkout", "-q", "main")
    return root


def wheel_path(path: str) -> str:
    """Where a checkout file lives in a wheel (the yaml files come from torchgen/packaged)."""
    return {
        NATIVE: "torchgen/packaged/ATen/native/native_functions.yaml",
        DERIVATIVES: "torchgen/packaged/autograd/derivatives.yaml",
    }.get(path, path)


def make_wheel(directory: Path, version: str, files: dict[str, str], build: str = "") -> Path:
    """A minimal installable-looking torch wheel with the Python tree of ``files`` (``build``:
    its file name's build tag, as PyPI's torch-2.10.0-3-... has)."""
    directory.mkdir(parents=True, exist_ok=True)
    tag = f"-{build}" if build else ""
    name = f"torch-{version}{tag}-py3-none-any.whl"
    dist = f"torch-{version}.dist-info"
    members = {wheel_path(p): t for p, t in files.items()
               if p.startswith(("torch/", "aten/", "tools/"))}
    members[f"{dist}/METADATA"] = f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n"
    members[f"{dist}/WHEEL"] = ("Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
                                "Tag: py3-none-any\n")
    members[f"{dist}/RECORD"] = "".join(f"{p},,\n" for p in members) + f"{dist}/RECORD,,\n"
    with zipfile.ZipFile(directory / name, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, text in sorted(members.items()):
            zf.writestr(path, text)
    return directory / name


class ReleaseTrees:
    """What the ``release_trees`` fixture hands a test: the BASE ("2.13") and HEAD ("2.14")
    trees, the paths and changes they differ by, and the makers of checkouts and wheels."""

    BASE = BASE
    HEAD = HEAD
    EXPECTED_FILES = EXPECTED_FILES
    NATIVE = NATIVE
    DERIVATIVES = DERIVATIVES
    CMI = CMI
    MODULES = MODULES
    LINALG = LINALG
    CORE = CORE
    git = staticmethod(git)
    write_tree = staticmethod(write_tree)
    make_checkout = staticmethod(make_checkout)
    make_wheel = staticmethod(make_wheel)
    wheel_path = staticmethod(wheel_path)
