"""pytest plugin: ``pytest -p spyre_stack.testing.pytest_plugin``.

At load time (before test modules import ``torch.testing._internal.common_device_type``, whose
device list is fixed at import) it registers the `spyre` backend and sets, unless already set,

* ``TORCH_TEST_DEVICES`` to ``spyre_stack/testing/device_base.py`` when it is not set (a set value
  is a subclass's own file, or a plugin that extends this base, and is respected),
* ``PYTORCH_TESTING_DEVICE_ONLY_FOR=privateuse1``.

It also records the estimated simulated device time of every test in its report
(``user_properties`` entry ``spyre_device_us``). ``--spyre-no-device-time`` turns that off.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest

from spyre_stack.testing import DEVICE_BASE_PATH


def setup_environment() -> None:
    """Register the backend and point upstream's device-generic machinery at it."""
    import sys

    if "torch.testing._internal.common_device_type" in sys.modules:
        import warnings

        warnings.warn(
            "common_device_type was imported before the spyre plugin: spyre variants may be "
            "missing; load the plugin with -p spyre_stack.testing.pytest_plugin",
            stacklevel=2,
        )
    os.environ.setdefault("TORCH_TEST_DEVICES", str(DEVICE_BASE_PATH))
    os.environ.setdefault("PYTORCH_TESTING_DEVICE_ONLY_FOR", "privateuse1")
    import spyre_stack

    spyre_stack.register()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--spyre-no-device-time",
        action="store_true",
        default=False,
        help="do not trace tests to record their simulated spyre device time",
    )


def pytest_configure(config: pytest.Config) -> None:
    setup_environment()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, None]:
    if item.config.getoption("--spyre-no-device-time"):
        yield
        return
    import spyre_stack

    with spyre_stack.trace() as t:
        yield
    item.user_properties.append(("spyre_device_us", round(t.device_us, 3)))
    item.user_properties.append(("spyre_ops", len(t.records)))
