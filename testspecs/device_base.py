"""TORCH_TEST_DEVICES file: the spec-applying device test base.

Upstream's common_device_type executes this file with its own globals (``runpy.run_path(path,
init_globals=globals())``) and appends ``TEST_CLASS`` to the device test bases, so this file does
not import common_device_type. It extends the backend's own TORCH_TEST_DEVICES class (configured
by the pytest plugin, or by ``TESTSPECS_BACKEND_BASE``) with the spec of ``TESTSPECS_SPECS``.
"""

import os as _os

from testspecs.apply import active_config as _active_config
from testspecs.apply import load_backend_base as _load_backend_base
from testspecs.apply import make_spec_test_base as _make_spec_test_base

_config = _active_config(dict(_os.environ))
_base = _load_backend_base(_config.backend_base if _config else None, dict(globals()))
TEST_CLASS = _make_spec_test_base(_base, _config) if _config is not None else _base
