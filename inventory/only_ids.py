"""``--only-ids FILE`` for our pytest plugins: run only the listed node ids.

Passing thousands of node ids on the command line makes pytest match each one against every
collected item; the plugins pass the test files instead and deselect the rest here, once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

OPTION = "--only-ids"


def add_option(parser: pytest.Parser) -> None:
    parser.addoption(
        OPTION, default=None, help="file of node ids, one a line: deselect every other test"
    )


def keep_listed(config: pytest.Config, items: list[pytest.Item]) -> None:
    path = config.getoption(OPTION)
    if not path:
        return
    wanted = set(Path(path).read_text(encoding="utf-8").split())
    dropped = [item for item in items if item.nodeid not in wanted]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = [item for item in items if item.nodeid in wanted]
