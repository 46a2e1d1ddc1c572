"""`relay replay --from A --to B` on released wheels: fetched from the package index by default,
`--offline` forbids it and says so, `RELAY_UPSTREAM_CACHE` is where the wheels are kept, and the
server's replay job plans the same step with the same specs and the same selection.

The package index here is a find-links folder of small generated torch wheels (pip runs for
real, with its configuration switched off), so nothing leaves the machine.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cli import build_app
from config.settings import Settings, reset_settings_cache
from wire.github.events import Envelope, normalize_envelope
from workers.plan import default_planner


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory, release_trees: Any) -> Path:
    folder = tmp_path_factory.mktemp("index")
    release_trees.make_wheel(folder, "2.13.0", release_trees.BASE)
    release_trees.make_wheel(folder, "2.14.0", release_trees.HEAD)
    return folder


@pytest.fixture
def pip_index(index: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """pip (run by the wheel source) sees only the generated wheels."""
    for name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    return index


def replay(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(build_app(), ["replay", *args], env=env)


def test_offline_with_an_empty_cache_names_the_flag(tmp_path: Path) -> None:
    result = replay("--from", "2.13", "--to", "2.14", "--offline", "--cache-dir", str(tmp_path))
    assert result.exit_code == 2
    assert (
        f"error: no cached torch wheel matches '2.13' in {tmp_path / 'wheels'}; --offline "
        "forbids asking the package index (run without --offline to download it)"
    ) in result.output


def test_offline_says_a_missing_wheel_before_collecting_the_universe(
    tmp_path: Path, fresh_host: Path
) -> None:
    """The step cannot be planned, so nothing is collected for it: the error comes at once, not
    after the installed universe's collection (minutes on a host with nothing cached)."""
    result = replay("--from", "2.13", "--to", "2.14", "--offline", "--cache-dir", str(tmp_path))
    assert result.exit_code == 2
    assert f"error: no cached torch wheel matches '2.13' in {tmp_path / 'wheels'}" in result.output
    assert not (fresh_host / "inventory").exists()


def test_the_wheel_cache_comes_from_relay_upstream_cache(tmp_path: Path, pip_index: Path) -> None:
    cache = tmp_path / "cache"
    # only the base release in the configured cache: offline, the head is missing from *it*
    (cache / "wheels").mkdir(parents=True)
    (cache / "wheels" / "torch-2.13.0-py3-none-any.whl").write_bytes(
        (pip_index / "torch-2.13.0-py3-none-any.whl").read_bytes()
    )
    result = replay(
        "--from", "2.13", "--to", "2.14", "--offline", env={"RELAY_UPSTREAM_CACHE": str(cache)}
    )
    assert result.exit_code == 2, result.output
    assert f"no cached torch wheel matches '2.14' in {cache / 'wheels'}" in result.output
    assert "resolving 2.13 and 2.14" in result.output  # progress, on stderr


@pytest.mark.slow  # the whole bundled universe (collected once) and the learned import map
def test_cli_and_the_servers_replay_job_plan_the_same_step(
    tmp_path: Path, pip_index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli_plan = _same_step(tmp_path, monkeypatch)
    # both applied the backend's own spec: some variants are removed by a spec skip
    assert any(r["reason"].startswith("spec: skip") for r in cli_plan["removed"])


def test_cli_and_the_servers_replay_job_plan_the_same_step_on_one_suite(
    tmp_path: Path, pip_index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CI-sized sample of the check above: the same two paths with the universe cut to the
    bundled `errors` suite (both plan through planner.release.universe_from_inventory) and an
    import map only when one was learned before (learning it is a traced run of minutes)."""
    import planner.release

    whole = planner.release.universe_from_inventory
    monkeypatch.setattr(
        planner.release,
        "universe_from_inventory",
        lambda **kwargs: whole(**{**kwargs, "suites": ("errors",)}),
    )
    learned = planner.release.import_map_for
    monkeypatch.setattr(
        planner.release, "import_map_for", lambda universe, **_: learned(universe, learn=False)
    )
    cli_plan = _same_step(tmp_path, monkeypatch)
    assert {t["test_id"].split("::")[0] for t in cli_plan["tests"]} == {
        "spyre_stack/conformance/test_errors.py"
    }


def _same_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """`relay replay --from 2.13 --to 2.14` and the server's replay job: the same plan."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("RELAY_UPSTREAM_CACHE", str(cache))
    out = tmp_path / "plan.json"
    result = replay("--from", "2.13", "--to", "2.14", "--out", str(out))
    assert result.exit_code == 0, result.output
    # fetched from the (generated) package index by default, into RELAY_UPSTREAM_CACHE
    assert "downloading torch==2.13.* from the package index" in result.output
    assert sorted(p.name for p in (cache / "wheels").iterdir()) == [
        "torch-2.13.0-py3-none-any.whl",
        "torch-2.14.0-py3-none-any.whl",
    ]
    cli_plan = json.loads(out.read_text())

    # the server: the replay task's delivery, normalized, through the workers' default planner
    payload = {
        "repository": {"full_name": "pytorch/pytorch"},
        "head_sha": "v2.14",
        "base_version": "2.13",
        "head_version": "2.14",
    }
    event = normalize_envelope(
        Envelope("periodic", payload, "replay"), delivery_id="replay-2.13-2.14"
    )
    monkeypatch.setenv("RELAY_DATABASE_URL", f"sqlite:///{tmp_path / 'relay.sqlite'}")
    reset_settings_cache()
    migrated = CliRunner().invoke(build_app(), ["db", "upgrade"])
    assert migrated.exit_code == 0, migrated.output
    planned = default_planner(event, Settings())
    reset_settings_cache()
    server = planned.selection
    assert server is not None
    assert [t["test_id"] for t in cli_plan["tests"]] == server.test_ids
    assert cli_plan["universe"]["variants"] == server.universe.variants
    assert [(s["stage"], s["count_out"]) for s in cli_plan["funnel"]] == [
        (s.stage, s.count_out) for s in server.funnel
    ]
    assert planned.total == len(server.tests)
    return cli_plan
