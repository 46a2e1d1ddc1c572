"""Mutation ground truth: single-function faults in upstream code the tests run on the device.

A mutant names one function (``module:qualname``). Loaded as a pytest plugin with
``RELAY_MUTANT=<name>``, this module replaces that function for the session by a wrapper that
misbehaves only when one of its tensor arguments lives on the backend's device (the CPU
reference the tests compare with is left alone): a floating result is shifted by 0.5, any other
result raises. The full universe then runs once per mutant (and once without), and the variants
whose outcome differs are the mutant's ground truth. Outcomes are recorded by this plugin with
``--results-out FILE``: one JSON line per finished test (its outcome, runner-seconds, first
failure line and, when tracing, the mutants it called), written as it finishes so a parent can
keep what a run finished even when the run dies later; a last line ``{"finished": true}`` says
the session ended.

With ``--mutant-trace`` (and no mutant) every catalogued function is wrapped by a recorder
instead, and each test's line names the mutants whose function it called on the device. The
fault only ever fires inside such a call, so a test absent from a mutant's trace
keeps its baseline outcome under that mutant: the per-mutant runs of the full universe can be
restricted to the traced tests without changing the result (checked against unrestricted full
runs in the evaluation report).

The catalogue lists functions the bundled suites execute on the device: ``torch.nn.functional``
Python wrappers, ``torch.functional`` helpers, ``Tensor`` methods written in Python, and the
reference implementations the decompositions use.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from inventory.only_ids import add_option, keep_listed
from testspecs.outcomes import fold

# name -> (module, qualname)
MUTANTS: dict[str, tuple[str, str]] = {
    f"F.{n}": ("torch.nn.functional", n)
    for n in (
        "relu",
        "relu6",
        "elu",
        "selu",
        "celu",
        "leaky_relu",
        "hardtanh",
        "silu",
        "mish",
        "hardswish",
        "hardsigmoid",
        "softmax",
        "log_softmax",
        "softmin",
        "glu",
        "normalize",
        "pad",
        "dropout",
        "logsigmoid",
        "softsign",
        "tanhshrink",
        "threshold",
        "layer_norm",
        "group_norm",
        "batch_norm",
        "instance_norm",
        "linear",
        "gelu",
        "cosine_similarity",
        "pairwise_distance",
        "embedding",
        "mse_loss",
        "l1_loss",
        "smooth_l1_loss",
    )
}
MUTANTS.update(
    {
        "torch.functional.norm": ("torch.functional", "norm"),
        "torch.functional.split": ("torch.functional", "split"),
        "torch.functional.broadcast_tensors": ("torch.functional", "broadcast_tensors"),
        "torch.functional.tensordot": ("torch.functional", "tensordot"),
        "torch.functional.cdist": ("torch.functional", "cdist"),
        "Tensor.__rsub__": ("torch._tensor", "Tensor.__rsub__"),
        "Tensor.__rdiv__": ("torch._tensor", "Tensor.__rdiv__"),
        "Tensor.__rpow__": ("torch._tensor", "Tensor.__rpow__"),
        "Tensor.__floordiv__": ("torch._tensor", "Tensor.__floordiv__"),
        "Tensor.split": ("torch._tensor", "Tensor.split"),
        "Tensor.unique": ("torch._tensor", "Tensor.unique"),
        "Tensor.norm": ("torch._tensor", "Tensor.norm"),
    }
)

DEVICE_TYPES = frozenset({"privateuse1", "spyre"})


def module_path(module: str) -> str:
    """``torch.nn.functional`` -> ``torch/nn/functional.py`` (the file a change would touch)."""
    mod = importlib.import_module(module)
    file = Path(mod.__file__ or "")
    parts = module.split(".")
    if file.name == "__init__.py":
        return "/".join([*parts, "__init__.py"])
    return "/".join([*parts[:-1], file.name])


def _on_device(values: Any, depth: int = 0) -> bool:
    import torch

    if isinstance(values, torch.Tensor):
        return values.device.type in DEVICE_TYPES
    if depth < 2 and isinstance(values, list | tuple):
        return any(_on_device(v, depth + 1) for v in values)
    if depth < 2 and isinstance(values, dict):
        return any(_on_device(v, depth + 1) for v in values.values())
    return False


def faulty(fn: Any, name: str) -> Any:
    import torch

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        if not (_on_device(args) or _on_device(kwargs)):
            return result
        if isinstance(result, torch.Tensor) and result.is_floating_point():
            return result + 0.5
        raise RuntimeError(f"mutant {name}: injected fault")

    return wrapper


_CURRENT: list[str] = [""]  # node id of the running test
_TRACE: dict[str, set[str]] = {}


def recording(fn: Any, name: str) -> Any:
    """``fn`` unchanged, noting the running test whenever it is called on the device."""
    seen = _TRACE.setdefault(name, set())

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _CURRENT[0] and (_on_device(args) or _on_device(kwargs)):
            seen.add(_CURRENT[0])
        return fn(*args, **kwargs)

    return wrapper


def _replace(name: str, wrap: Any) -> None:
    module, qual = MUTANTS[name]
    owner: Any = importlib.import_module(module)
    parts = qual.split(".")
    for part in parts[:-1]:
        owner = getattr(owner, part)
    setattr(owner, parts[-1], wrap(getattr(owner, parts[-1]), name))


def apply(name: str) -> None:
    _replace(name, faulty)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--results-out",
        default=None,
        help="append one JSON line per finished test here: id, outcome, seconds, message, traced",
    )
    add_option(parser)
    parser.addoption(
        "--mutant-trace",
        action="store_true",
        default=False,
        help="record which tests call each catalogued function on the device (results' traced)",
    )


_OUTCOMES: dict[str, str] = {}
_DURATIONS: dict[str, float] = {}
_MESSAGES: dict[str, str] = {}
_RESULTS: list[str] = []  # the --results-out file


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--results-out"):
        _RESULTS.append(config.getoption("--results-out"))
    name = os.environ.get("RELAY_MUTANT")
    if name:
        apply(name)
    elif config.getoption("--mutant-trace"):
        for each in MUTANTS:
            _replace(each, recording)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    keep_listed(config, items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    _CURRENT[0] = item.nodeid
    try:
        return (yield)
    finally:
        _CURRENT[0] = ""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    node = report.nodeid
    _OUTCOMES[node] = fold(_OUTCOMES.get(node), report)
    _DURATIONS[node] = _DURATIONS.get(node, 0.0) + report.duration
    if report.failed and node not in _MESSAGES:
        crash = getattr(report.longrepr, "reprcrash", None)
        text = str(getattr(crash, "message", None) or report.longreprtext or "")
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        _MESSAGES[node] = lines[0][:300] if lines else ""
    if report.when == "teardown" and _RESULTS:
        line = {
            "id": node,
            "outcome": _OUTCOMES[node],
            "seconds": round(_DURATIONS[node], 6),
            "message": _MESSAGES.get(node),
            "traced": sorted(name for name, seen in _TRACE.items() if node in seen),
        }
        _append(_RESULTS[0], line)


def _append(path: str, line: dict[str, Any]) -> None:
    """One whole line at the end of ``path`` (a reader sees it complete or not at all)."""
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(line, sort_keys=True) + "\n")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _RESULTS:
        _append(_RESULTS[0], {"finished": True, "exitstatus": int(exitstatus)})
