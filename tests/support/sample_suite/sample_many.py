"""Many quick tests (the scheduling tests' stand-in for a release replay of thousands of
variants). Not collected by `make test` (its name does not match test_*.py)."""

import os
import time

import pytest

COUNT = 2400


@pytest.mark.parametrize("i", range(COUNT))
def test_many(i):
    time.sleep(float(os.environ.get("SAMPLE_MANY_SECONDS", "0.01")))
    assert i >= 0
