"""Running upstream-style device-generic tests on the simulated card.

* :mod:`.base` - ``SpyreTestBase``, the device test base (subclass of upstream's
  ``PrivateUse1TestBase``);
* ``device_base.py`` - the file to point ``TORCH_TEST_DEVICES`` at;
* :mod:`.pytest_plugin` - ``pytest -p spyre_stack.testing.pytest_plugin`` registers the backend and
  sets the environment before ``torch.testing._internal.common_device_type`` is imported.
"""

from pathlib import Path

DEVICE_BASE_PATH = Path(__file__).resolve().parent / "device_base.py"
