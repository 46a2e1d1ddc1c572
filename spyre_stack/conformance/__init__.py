"""Bundled device-generic conformance suites.

Test modules in upstream's style, parametrized by the installed torch's own test databases
(``op_db``, ``module_db``) and instantiated with ``instantiate_device_type_tests`` so variant ids
follow upstream's scheme: ``TestCommonPRIVATEUSE1::test_compare_cpu_add_spyre_float16``. They are
collected only when pointed at (``pytest spyre_stack/conformance``); ``SUITES`` names them for
the inventory.
"""

from __future__ import annotations

from pathlib import Path

SUITE_DIR = Path(__file__).resolve().parent

# suite name -> test module file (relative to SUITE_DIR)
SUITES: dict[str, str] = {
    "common": "test_common.py",
    "out": "test_out.py",
    "variants": "test_variants.py",
    "gradients": "test_gradients.py",
    "errors": "test_errors.py",
    "modules": "test_modules.py",
}


def suite_files() -> dict[str, Path]:
    return {name: SUITE_DIR / file for name, file in SUITES.items()}
