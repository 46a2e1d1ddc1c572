"""A host with nothing: `relay up` with a fresh RELAY_VAR_DIR, no cache seed, its own HOME and a
working folder of its own. Its workers' spyre C++ core goes to RELAY_VAR_DIR/torch_extensions,
which it lacks: the log says it builds it there; a pull request goes through the default planner;
every file the stack wrote is under its var dir (nothing in the working folder or HOME).
In `make test-long`: `make test`'s stacks already cover the loop, this one is the var dir's
check (its cold spyre build, a minute or more, is left to the first test process that needs it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.long


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


@pytest.mark.timeout(900)
def test_a_fresh_host_builds_what_it_lacks_under_its_var_dir_and_says_so(
    relay_up: Any, tmp_path: Path
) -> None:
    var, home, cwd = tmp_path / "var", tmp_path / "home", tmp_path / "cwd"
    for folder in (var, home, cwd):
        folder.mkdir()
    env = {
        "HOME": str(home),
        "RELAY_CACHE_SEED": "",  # nothing to copy from: everything is built here
        "RELAY_RUNNER_ENABLED": "true",  # the default planner
        "RELAY_EVENT_HANDLERS": "[]",
        "RELAY_WARM_POOL_AT_BOOT": "false",  # no cold build of the spyre core at boot
    }
    stack = relay_up.local(var, extra_env=env, cwd=cwd)
    try:
        job = stack.wait_job(stack.submit(relay_up.pull_request()), timeout=120)
        assert job.conclusion == "neutral"  # no checkout: nothing can test it, said at once
    finally:
        stack.stop()
    building = [
        r
        for r in stack.log_lines()
        if r.get("event") == "cache entry missing on this host: building it"
    ]
    assert [r["cache"] for r in building] == [str(var / "torch_extensions")]
    assert _files(cwd) == [] and _files(home) == []
    written = {Path(f).parts[0] for f in _files(var)}
    assert {"relay.sqlite", "broker.sqlite", "relay-up.log"} <= written
