"""Tests that tell which torch they run under: the overlay of tests.support.overlay_repo's head
(``torch.functional.RELAY_OVERLAY_PROBE``) or the installed torch (no probe)."""

import pytest
import torch.functional


@pytest.mark.parametrize("n", range(4))
def test_sees_the_head(n: int) -> None:
    assert getattr(torch.functional, "RELAY_OVERLAY_PROBE", None) == "laid over"


@pytest.mark.parametrize("n", range(4))
def test_sees_the_installed_torch(n: int) -> None:
    assert not hasattr(torch.functional, "RELAY_OVERLAY_PROBE")
