"""``python -P backends/pytest_main.py ARGS``: pytest's console entry, started from this file.

:func:`backends.base.fresh_pytest` starts pytest this way rather than with ``python -m pytest``.
Under ``-m`` the bottom frames of every stack belong to ``<frozen runpy>``, a file no module has;
upstream's device-generic tests walk the stack with ``inspect.stack()`` several times per test
(``common_utils.extract_test_fn``, behind the OpInfo sample iterators), and ``inspect`` looks for
the module of such a frame by scanning all of ``sys.modules`` (thousands with torch's test
machinery loaded) every time: about 16 times the cost of the same walk from a script file
(4 ms against 66 ms a walk measured here, docs/benchmarks.md). ``-P`` keeps this folder off
``sys.path``, as it keeps the working folder off it under ``-m``.
"""

from __future__ import annotations

import sys

import pytest

if __name__ == "__main__":
    sys.exit(pytest.console_main())
