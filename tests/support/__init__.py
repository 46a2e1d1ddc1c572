"""Helpers behind the test fixtures: real services, a running `relay up`, generated upstream
repositories, the CRCR callback receiver, and the plugins a relay under test loads by dotted path
(``tests.support.planners``, ``tests.support.handlers``).

Only ``conftest.py`` files (and the benchmarks) import this package; test modules get everything
through fixtures (``tests/test_tests.py`` checks it). Nothing here is collected as tests.
"""
