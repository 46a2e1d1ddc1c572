"""A small suite the runner tests plan (its file name does not match test_*.py, so `make test` does not collect it; the runner passes its node ids explicitly).

Faults are switched on by environment variables the test stacks set for the test process, so the
same ids can pass in one run and crash in another.
"""

import os
import signal
import time

import pytest


def test_passes_one():
    assert sum([1, 2]) == 3


def test_passes_two():
    assert "ab".upper() == "AB"


def test_slow_a():
    time.sleep(float(os.environ.get("SAMPLE_SLOW_SECONDS", "0.2")))


def test_slow_b():
    time.sleep(float(os.environ.get("SAMPLE_SLOW_SECONDS", "0.2")))


def test_slow_c():
    time.sleep(float(os.environ.get("SAMPLE_SLOW_SECONDS", "0.2")))


def test_slow_d():
    time.sleep(float(os.environ.get("SAMPLE_SLOW_SECONDS", "0.2")))


def test_fails():
    assert 2 + 2 == 5, "arithmetic is broken"


def test_segfaults():
    os.kill(os.getpid(), signal.SIGSEGV)


def test_hangs():
    time.sleep(3600)


@pytest.mark.skip(reason="never runs")
def test_skipped():
    pass
