"""The fixtures every test folder shares. Their implementations live in ``tests/support`` (which
only conftest files and the benchmarks import; test modules ask for fixtures).

Imports of the support modules are deferred to the fixtures: pytest runs that the tests start in
subprocesses (the sample suites, the mutation suite) load this file too, and stay light.

- paths: ``repo_root``, ``github_fixtures`` (tests/data/github: GitHub payloads written for the
  tests), ``example_events`` (the project's own, examples/events). Everything a test reads lives
  in the repository (tests/test_tests.py keeps it so).
- services: ``free_port()``, ``fresh_postgres_database()`` (a context manager), ``postgres_url``,
  ``fresh_redis_url()``, ``run_python(code, env)``
- a running relay: ``relay_up`` (:class:`tests.support.stack.RelayUp`: ``local(tmp)``,
  ``start(...)``, ``running(kind, tmp)``, ``SECRETS``, ``UPSTREAM``, ``MAX_BODY``, ...) and the
  runner's sample plans, ``sample_runs`` (:class:`tests.support.runs.SampleRuns`)
- CRCR callbacks: ``recording_receiver()`` (a context manager), ``receiver`` (one per module)
- generated upstreams: ``release_trees`` (:class:`tests.support.release_trees.ReleaseTrees`,
  the 2.13/2.14 checkout and wheels) and ``small_upstream``
  (:class:`tests.support.small_upstream.SmallUpstream`, the repository and universe of the
  selector tests); ``overlay_upstream`` (:class:`tests.support.overlay_repo.OverlayUpstream`,
  a repository whose head changes Python files of the installed torch)
- ``allowlist_sample``: a CRCR allowlist with every documented shape
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest

# PyTorch's public CI statistics are not part of the project (a user downloads them into
# RELAY_CI_STATS, else the cache). The suite runs as a fresh machine does: RELAY_CI_STATS names a
# folder of the repository that holds none of them, so no test reads the user's cache; the tests
# of those priors pass their own small files (tests/data/pytorch-ci-stats). Set before any test
# imports the commands, whose option defaults read it.
os.environ.setdefault(
    "RELAY_CI_STATS", str(Path(__file__).resolve().parent / "data" / "no-ci-stats")
)
# The release steps tests plan are built from small generated torch wheels, which have no OpInfo
# database to fingerprint; tests/upstream/test_behaviour.py runs the fingerprints for real.
os.environ.setdefault("RELAY_RELEASE_FINGERPRINTS", "false")
# Every cache lives under RELAY_VAR_DIR, one var dir per host (store.caches). The stacks the tests
# start each get a fresh var dir of their own; the session's var dir (RELAY_VAR_DIR, else the
# project's var/) is their seed, read only: a keyed entry a stack lacks (the inventory, the spyre
# C++ core) is copied from it rather than built again (a cold inventory takes minutes).
os.environ.setdefault(
    "RELAY_CACHE_SEED",
    str(
        Path(
            os.environ.get("RELAY_VAR_DIR") or Path(__file__).resolve().parent.parent / "var"
        ).absolute()
    ),
)

if TYPE_CHECKING:
    from selector import Variant
    from tests.support.overlay_repo import OverlayUpstream
    from tests.support.receiver import Receiver
    from tests.support.release_trees import ReleaseTrees
    from tests.support.runs import SampleRuns
    from tests.support.small_upstream import SmallUpstream
    from tests.support.stack import RelayUp


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The project's root (the working folder of every subprocess the tests start)."""
    from tests.support.services import REPO_ROOT

    return REPO_ROOT


@pytest.fixture(scope="session")
def github_fixtures() -> Path:
    """tests/data/github: GitHub webhook payloads written for the tests, GitHub's layout (one
    folder per event, ``<name>.payload.json``), of the test stacks' upstream."""
    from tests.support.services import GITHUB_FIXTURES

    return GITHUB_FIXTURES


@pytest.fixture(scope="session")
def example_events(repo_root: Path) -> Path:
    """examples/events: the project's own example deliveries (``<event>.<name>.json``, the
    upstream pytorch/pytorch), what `relay submit --example` posts."""
    return repo_root / "examples" / "events"


@pytest.fixture(scope="session")
def free_port() -> Callable[[], int]:
    """``free_port()``: a loopback port nothing listens on (at the time of asking)."""
    from tests.support.services import free_port

    return free_port


@pytest.fixture(scope="session")
def fresh_postgres_database() -> Callable[[], AbstractContextManager[str]]:
    """``with fresh_postgres_database() as url``: a new database on the CI server, dropped
    afterwards (skips without RELAY_TEST_POSTGRES_URL; fails under CI=true)."""
    from tests.support.services import fresh_postgres_database

    return fresh_postgres_database


@pytest.fixture
def postgres_url(
    fresh_postgres_database: Callable[[], AbstractContextManager[str]],
) -> Iterator[str]:
    """The URL of a new PostgreSQL database for one test."""
    with fresh_postgres_database() as url:
        yield url


@pytest.fixture(scope="session")
def fresh_redis_url() -> Callable[[], str]:
    """``fresh_redis_url()``: a flushed Redis database index of the CI server (skips without
    RELAY_TEST_REDIS_URL; fails under CI=true)."""
    from tests.support.services import fresh_redis_url

    return fresh_redis_url


@pytest.fixture
def own_redis(tmp_path: Path, free_port: Callable[[], int]) -> Iterator[Any]:
    """A redis-server of the test's own (no persistence) to kill and restart: a broker outage
    (:class:`tests.support.relay_role.OwnRedis`: ``url``, ``start()``, ``stop()``)."""
    import shutil

    from tests.support.relay_role import OwnRedis

    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (bash .ci/run installs it)")
    server = OwnRedis(tmp_path, free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def run_python() -> Callable[..., Any]:
    """``run_python(code, env=None, timeout=300)``: a snippet in a fresh interpreter, in the
    project root (a CompletedProcess with text output)."""
    from tests.support.services import run_python

    return run_python


@pytest.fixture(scope="session")
def relay_up() -> RelayUp:
    """Starts `relay up` stacks (uvicorn + real Celery workers) and knows their configuration."""
    from tests.support.stack import RelayUp

    return RelayUp()


@pytest.fixture(scope="session")
def sample_runs() -> SampleRuns:
    """The runner's named plans over the sample suite, and pull requests that pick them."""
    from tests.support.runs import SampleRuns

    return SampleRuns()


@pytest.fixture(scope="session")
def recording_receiver() -> Callable[[], AbstractContextManager[Receiver]]:
    """``with recording_receiver() as r``: an HTTP server recording CRCR callbacks
    (``r.url``, ``r.calls``)."""
    from tests.support.receiver import recording_receiver

    return recording_receiver


@pytest.fixture(scope="module")
def receiver(
    recording_receiver: Callable[[], AbstractContextManager[Receiver]],
) -> Iterator[Receiver]:
    """One recording CRCR callback receiver per test module."""
    with recording_receiver() as r:
        yield r


@pytest.fixture(scope="session")
def release_trees() -> ReleaseTrees:
    """The generated 2.13 and 2.14 PyTorch-layout trees, as checkouts and wheels."""
    from tests.support.release_trees import ReleaseTrees

    return ReleaseTrees()


@pytest.fixture(scope="session")
def synthetic_steps() -> ModuleType:
    """:mod:`tests.support.synthetic_steps`: small stored release steps (universes, runs, step
    inputs) a test writes into its own folder, and the wheels' stand-in that reads them."""
    from tests.support import synthetic_steps

    return synthetic_steps


@pytest.fixture(scope="session")
def small_upstream() -> SmallUpstream:
    """The small generated upstream repository of the selector tests, and its universe."""
    from tests.support.small_upstream import SmallUpstream

    return SmallUpstream()


@pytest.fixture(scope="session")
def ops_variant(small_upstream: SmallUpstream) -> Callable[[str, str], Variant]:
    """``make(op, dtype)``: a ``test_compare_cpu`` variant of the bundled spyre ops suite."""

    def make(op: str, dtype: str) -> Variant:
        return small_upstream.variant(
            "test_compare_cpu", op, dtype, file="spyre_stack/conformance/test_ops.py", suite="ops"
        )

    return make


@pytest.fixture
def overlay_upstream(tmp_path: Path) -> OverlayUpstream:
    """A small upstream repository over the installed torch: its base holds the installed
    torch's own files, its head changes ``torch/functional.py`` (``probe``), adds a module and
    changes a compiled file (:mod:`tests.support.overlay_repo`)."""
    from tests.support.overlay_repo import overlay_upstream as make

    return make(tmp_path)


@pytest.fixture
def fresh_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """This process as a host with nothing: RELAY_VAR_DIR is a new ``tmp/var``, no cache seed,
    settings built again (and again after the test). The var dir's path."""
    from config.settings import reset_settings_cache

    monkeypatch.setenv("RELAY_VAR_DIR", str(tmp_path / "var"))
    monkeypatch.delenv("RELAY_CACHE_SEED", raising=False)
    reset_settings_cache()
    try:
        yield tmp_path / "var"
    finally:
        monkeypatch.undo()
        reset_settings_cache()


@pytest.fixture(scope="session")
def allowlist_sample() -> str:
    """A CRCR allowlist (``.github/allowlist.yml`` format) with every documented shape."""
    from tests.support.allowlist import SAMPLE

    return SAMPLE


# ---- selection requests priced as a planner would (tests/support/selection.py)


@pytest.fixture
def select() -> Callable[..., Any]:
    """``select`` of one request priced for its universe: history, a flat runner-seconds prior
    unless the test gives an estimate, the backend's device-time hook."""
    from tests.support import selection

    return selection.plan


@pytest.fixture
def plan_everything() -> Callable[..., Any]:
    """Every variant (cut to the budget) with a reason as the fallback."""
    from tests.support import selection

    return selection.plan_everything


@pytest.fixture
def selection_costs() -> Callable[..., Any]:
    """The costs a planner prices a universe with (flat runner prior, device-time hook)."""
    from tests.support import selection

    return selection.costs
