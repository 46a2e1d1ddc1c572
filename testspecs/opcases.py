"""Op-level YAML tests as real pytest tests: ``pytest -p testspecs.opcases SPEC.yaml``.

torch-spyre's model op-test files (``model_ops_tests/<model>.yaml`` and ``<model>_spyre.yaml``)
record, for each op a model called, the op and its inputs as an ``edits.ops.include`` item of a
test entry (``TestSpyreModelOps::test_model_ops_db``). This plugin collects such a spec file
directly: each include item is one test, named after its unique tag when it has one
(``torch.add.1_spyre``), else ``<op>.<n>``. The test builds the recorded inputs on the CPU
(seeded from ``global.input_config.seed``), runs the op there, runs it again on the device under
test with the same values (recorded devices such as ``cuda:0`` mapped to it), and compares the
results with the spec's tolerances for the result's dtype (``global.supported_dtypes[].precision``).

The entry's mode decides like everywhere else: ``skip`` generates nothing, ``xfail`` and
``xfail_strict`` become pytest's own xfail (these are plain pytest items, so the mark works), and
``mandatory_success`` must pass. Tags become marks. A test whose inputs cannot be built reports
the reason as its failure.
"""

from __future__ import annotations

import re
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from testspecs.edits import OpsIncludeItem
from testspecs.errors import SpecError
from testspecs.models import SpecDocument

_ID_SAFE = re.compile(r"[^0-9A-Za-z_.\-]+")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("testspecs-opcases", "op-level YAML tests")
    group.addoption(
        "--opcases-device",
        default=None,
        help="the device under test (default: the PrivateUse1 backend's name, else cpu)",
    )


def _device(config: pytest.Config) -> str:
    chosen = config.getoption("opcases_device")
    if chosen:
        return str(chosen)
    import torch

    name = torch._C._get_privateuse1_backend_name()
    return name if name != "privateuse1" else "cpu"


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix not in (".yaml", ".yml"):
        return None
    head = file_path.read_text(encoding="utf-8", errors="replace")[:4096]
    if "test_suite_config" not in head:
        return None
    return SpecFile.from_parent(parent, path=file_path)


@dataclass(frozen=True)
class OpTest:
    """One op-level test of a spec file: what pytest collects, and ``relay tests list`` lists."""

    name: str  # the pytest item name: test_model_ops_db[torch.add.1_spyre]
    item: OpsIncludeItem
    mode: str
    reason: str | None
    tags: tuple[str, ...]

    @property
    def dtype(self) -> str | None:
        """The dtype of the op's first tensor input (what the test mostly exercises)."""
        for arg in self.item.inputs().args:
            tensor = arg.tensor or (arg.tensor_list[0] if arg.tensor_list else None)
            if tensor is not None:
                return tensor.dtype.removeprefix("torch.")
        return None


def op_tests(document: SpecDocument) -> list[OpTest]:
    """Every include item with recorded inputs, of every entry whose mode runs."""
    out: list[OpTest] = []
    for f in document.files:
        for entry in f.tests:
            if entry.effective_mode == "skip":
                continue
            used: Counter[str] = Counter()
            for item in entry.edits.ops.include:
                if item.sample_inputs_func is None and not item.kwargs:
                    continue  # an op added to an @ops list, not an op-level test
                out.append(
                    OpTest(
                        name=_test_name(item, used, entry.names[0]),
                        item=item,
                        mode=entry.effective_mode,
                        reason=entry.reason,
                        tags=(*entry.tags, *item.tags),
                    )
                )
    return out


class SpecFile(pytest.File):
    def collect(self) -> Iterator[pytest.Item]:
        from testspecs.loader import load_file

        try:
            spec = load_file(self.path)
        except SpecError as e:
            raise self.CollectError(f"invalid spec:\n{e}") from None
        seed = spec.document.global_config.input_config.seed
        precision = {
            ("float16" if d.name == "half" else d.name): d.precision
            for d in spec.document.global_config.supported_dtypes
            if d.precision is not None
        }
        for t in op_tests(spec.document):
            test = OpCase.from_parent(
                self, name=t.name, op_item=t.item, seed=seed, precision=precision
            )
            if t.mode in ("xfail", "xfail_strict"):
                reason = t.reason or f"spec: {t.mode}"
                test.add_marker(pytest.mark.xfail(reason=reason, strict=t.mode == "xfail_strict"))
            test.user_properties += [("spec_mode", t.mode), ("spec_op", t.item.name)]
            for tag in t.tags:
                if tag.isidentifier():
                    self.config.addinivalue_line("markers", f"{tag}: spec tag")
                    test.add_marker(getattr(pytest.mark, tag))
            yield test


def _test_name(item: OpsIncludeItem, used: Counter[str], entry_name: str) -> str:
    unique = [t for t in item.tags if t.startswith(item.name + ".")]
    base = unique[-1] if unique else item.name
    used[base] += 1
    name = base if used[base] == 1 and unique else f"{base}.{used[base]}"
    method = entry_name.rpartition("::")[2]
    return f"{method}[{_ID_SAFE.sub('_', name)}]"


class OpCase(pytest.Item):
    def __init__(
        self,
        *,
        op_item: Any,
        seed: int | None,
        precision: dict[str, Any],
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.op_item = op_item
        self.seed = seed
        self.precision = precision

    def runtest(self) -> None:
        import torch

        from testspecs.inputs import OpNotRegistered, build_call, resolve_op, to_device

        device = _device(self.config)
        try:
            fn = resolve_op(self.op_item.name)
        except OpNotRegistered as exc:
            pytest.skip(str(exc))
        getitem = self.op_item.name.rpartition(".")[2] == "getitem"

        def inputs() -> Any:
            call = build_call(self.op_item.inputs(), seed=self.seed)
            if getitem and len(call.args) > 1 and isinstance(call.args[1], list):
                # a recorded index of several tensors was a tuple in the model (x[a, b])
                call.args[1] = tuple(call.args[1])
            return call

        # each side gets inputs of its own (the same seed, the same values): an in-place op
        # (add_, index_copy_) run on the CPU first must not change what the device is given
        on_cpu = to_device(inputs(), "cpu")
        on_device = to_device(inputs(), device)
        # a warning of the op (a deprecation, the device's down-cast notice) is not its result:
        # the test suite's own "warnings are errors" must not fail a device test
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = fn(*on_cpu.args, **on_cpu.kwargs)
            actual = fn(*on_device.args, **on_device.kwargs)
        _compare(actual, expected, self.precision, device)

    def repr_failure(self, excinfo: Any, style: Any = None) -> str:
        return f"{self.op_item.name}: {excinfo.typename}: {excinfo.value}"

    def reportinfo(self) -> tuple[Path, int | None, str]:
        loc = self.op_item.loc
        return self.path, (loc.line - 1 if loc else None), f"{self.op_item.name}: {self.name}"


def _compare(actual: Any, expected: Any, precision: dict[str, Any], device: str) -> None:
    import torch

    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            raise AssertionError(f"expected a tensor, got {type(actual).__name__}")
        if actual.device.type != torch.device(device).type and expected.device.type == "cpu":
            # an op asked for another device (torch.to(x, 'cpu')): compare where it landed
            pass
        p = precision.get(str(expected.dtype).removeprefix("torch."))
        atol = p.atol if p is not None and p.atol is not None else None
        rtol = p.rtol if p is not None and p.rtol is not None else None
        if (atol is None) != (rtol is None):
            atol, rtol = atol or 0.0, rtol or 0.0
        torch.testing.assert_close(
            actual.cpu(), expected, atol=atol, rtol=rtol, check_device=False, equal_nan=True
        )
        return
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)) or len(actual) != len(expected):
            raise AssertionError(f"expected {len(expected)} results, got {actual!r:.80}")
        for a, e in zip(actual, expected, strict=True):
            _compare(a, e, precision, device)
        return
    if isinstance(expected, (torch.device, torch.dtype)):
        return
    if actual != expected:
        raise AssertionError(f"expected {expected!r}, got {actual!r}")
