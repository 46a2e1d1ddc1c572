"""``distributions``: install a distribution that declares entry points for one test
(:class:`tests.support.distributions.Distributions`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def distributions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    from tests.support.distributions import distributions

    yield from distributions(tmp_path, monkeypatch)
