"""The README's first steps from a bare clone, as a new user takes them: the committed project
cloned into a temporary folder with no ../shared beside it, `make run` (which makes .venv and
installs the project from the configured package index, migrates the embedded database and
starts `relay up`), then the README's next commands: `relay submit --example
pull_request.opened` answers 202, `GET /api/v1/deliveries` lists the delivery, and the delivery
gets a job (planned by the default planner) that links back to it; with no upstream checkout
nothing can test the pull request, so the job runs nothing and concludes neutral with the reason.
`/docs` loads its assets from the server itself.

It clones HEAD: uncommitted changes are not in it. The first start's demo replay is turned off
(``RELAY_DEMO_REPLAY=``: it would fetch two torch wheels); everything else is the default.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

SETUP_SECONDS = 1200  # making .venv from the package index, migrating, starting
JOB_SECONDS = 900  # planning the first job: builds the device extension, collects the suites
# What this test run's own environment sets and a user's shell does not: the project's settings,
# the outer venv, pytest's and the device plugin's variables, an outer `make`'s flags (`make test
# VENV=...` would reach the clone's `make run` through MAKEFLAGS).
INHERITED = (
    "RELAY_", "VIRTUAL_ENV", "PYTEST", "PYTHON", "SPYRE_", "TORCH_", "PYTORCH_", "MAX_JOBS",
    "MAKE", "MFLAGS",
)  # fmt: skip


@dataclass
class Clone:
    root: Path
    env: dict[str, str]
    base_url: str
    log: Path

    def relay(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.root / ".venv" / "bin" / "relay"), *args], cwd=self.root, env=self.env,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    def get(self, path: str) -> Any:
        response = httpx.get(f"{self.base_url}{path}", timeout=30)
        response.raise_for_status()
        return response.json()


def _wait(what: str, check: Callable[[], Any], timeout: float, log: Path) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            found = check()
            if found:
                return found
        time.sleep(2)
    tail = log.read_text(errors="replace")[-4000:] if log.exists() else ""
    pytest.fail(f"no {what} after {timeout:.0f} s; make run's output ends:\n{tail}")


@pytest.fixture(scope="module")
def clone(
    repo_root: Path, tmp_path_factory: pytest.TempPathFactory, free_port: Callable[[], int]
) -> Iterator[Clone]:
    home = tmp_path_factory.mktemp("bare")
    root = home / "crcr-relay"
    subprocess.run(["git", "clone", "--quiet", str(repo_root), str(root)], check=True, timeout=300)
    assert not (home / "shared").exists()  # a user's machine: no ../shared
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(INHERITED)}
    env.update(RELAY_PORT=str(port), RELAY_DEMO_REPLAY="")
    log = home / "make-run.log"
    with log.open("wb") as out:
        make = subprocess.Popen(
            ["make", "run"], cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    made = Clone(root=root, env=env, base_url=f"http://127.0.0.1:{port}", log=log)
    try:
        _wait("/healthz", lambda: make.poll() is None and made.get("/healthz")["ok"],
              SETUP_SECONDS, log)  # fmt: skip
        yield made
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(make.pid, signal.SIGTERM)  # make and `relay up`, which stops its workers
        try:
            make.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(make.pid, signal.SIGKILL)
            make.wait()


@pytest.mark.clone
@pytest.mark.timeout(SETUP_SECONDS + JOB_SECONDS + 300)
def test_the_readme_path_from_a_bare_clone(clone: Clone) -> None:
    assert (clone.root / ".venv" / ".installed").exists()  # make run's setup made the venv
    submitted = clone.relay("submit", "--example", "pull_request.opened")
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    assert submitted.stdout.startswith("202 "), submitted.stdout
    delivery_id = re.search(r"\(delivery ([0-9a-f-]{36})\)", submitted.stdout).group(1)  # type: ignore[union-attr]

    listed = clone.get("/api/v1/deliveries")
    assert [d["delivery_id"] for d in listed["items"]] == [delivery_id]
    job = _wait(
        "job for the delivery",
        lambda: next(iter(clone.get(f"/api/v1/deliveries/{delivery_id}")["job_ids"]), None),
        JOB_SECONDS,
        clone.log,
    )
    # the job exists from the moment its planning starts (status "planning"); wait for its plan
    detail = _wait(
        "planned job",
        lambda: (d := clone.get(f"/api/v1/jobs/{job}"))["status"] != "planning" and d,
        JOB_SECONDS,
        clone.log,
    )
    assert (detail["delivery_id"], detail["event_type"], detail["pr_number"]) == (
        delivery_id, "pull_request", 170001)  # fmt: skip
    # no upstream checkout and no head wheel: nothing here can test the change, so nothing runs
    # and the job concludes neutral at once, saying why (never success for an untested change)
    assert detail["planned"] == 0 and detail["shards"] == []
    tested = detail["upstream_under_test"]
    assert tested["kind"] == "none" and "RELAY_UPSTREAM_PATH" in tested["reason"], tested
    done = _wait(
        "neutral job",
        lambda: (d := clone.get(f"/api/v1/jobs/{job}"))["status"] == "completed" and d,
        60,
        clone.log,
    )
    assert done["conclusion"] == "neutral"

    docs = httpx.get(f"{clone.base_url}/docs", timeout=30)
    assert docs.status_code == 200 and "https://" not in docs.text
    assert httpx.get(f"{clone.base_url}/static/docs/swagger-ui-bundle.js", timeout=30).is_success
