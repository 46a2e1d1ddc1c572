"""docker-compose.yml, .env.example and openapi.json are artifacts: check them (no Docker engine
here, so the compose file is validated by structure)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from config.settings import Settings
from relay.openapi_doc import render

ROOT = Path(__file__).resolve().parents[2]


def test_compose_services_and_environment() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"api", "worker", "beat", "redis", "postgres"} <= set(services)
    for name in ("api", "worker", "control", "beat", "migrate"):
        env = services[name]["environment"]
        assert env["RELAY_DATABASE_URL"].startswith("postgresql+psycopg://")
        assert env["RELAY_DATABASE_URL"].split("@")[1].startswith("postgres:")
        assert env["RELAY_BROKER_URL"].startswith("redis://redis:")
        assert env["RELAY_ENV"] == "production"
        assert "RELAY_WEBHOOK_SECRETS" in env
        assert services[name]["build"] == "."
        assert services[name]["depends_on"]["migrate" if name != "migrate" else "postgres"]
    assert services["api"]["ports"] == ["8000:8000"]
    assert "relay.app:app" in services["api"]["command"]
    assert services["worker"]["command"][:4] == ["relay", "worker", "--queues", "shards"]
    assert services["control"]["command"][:4] == ["relay", "worker", "--queues", "relay"]
    assert "beat" in services["beat"]["command"]
    assert services["migrate"]["command"] == ["relay", "db", "upgrade"]
    for infra in ("redis", "postgres"):
        assert "healthcheck" in services[infra]
    assert (ROOT / "Dockerfile").exists()
    for named in compose.get("volumes", {}):
        assert any(
            v.split(":")[0] == named for s in services.values() for v in s.get("volumes", [])
        )


def test_compose_scales_without_a_shared_disk() -> None:
    """What the compose file sets is what the code reads; scaled workers share no disk."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    fields = {f"RELAY_{name.upper()}" for name in Settings.model_fields}
    for name, service in services.items():
        unknown = {k for k in service.get("environment", {}) if k.startswith("RELAY_")} - fields
        assert not unknown, f"{name} sets what no setting reads: {sorted(unknown)}"
    for name in ("planner", "worker"):  # one shard per shard worker for a short job
        assert services[name]["environment"]["RELAY_RUNNER_PARALLEL"] == (
            "${RELAY_RUNNER_PARALLEL:-2}"
        )
    # the default is one replica's concurrency
    assert services["worker"]["command"][-2:] == ["--concurrency", "2"]
    mounted: dict[str, list[str]] = {}
    for name, service in services.items():
        for volume in service.get("volumes", []):
            mounted.setdefault(volume.split(":")[0], []).append(name)
    assert set(mounted) == set(compose["volumes"]) == {"pgdata", "redisdata", "beatschedule"}
    assert all(len(users) == 1 for users in mounted.values()), mounted  # nothing shared
    assert "worker" not in mounted.get("beatschedule", [])  # each replica: its own var folder
    assert services["worker"]["environment"]["RELAY_VAR_DIR"] == "/var/lib/relay"


def test_env_example_documents_every_setting() -> None:
    documented = set(re.findall(r"^(RELAY_[A-Z_]+)=", (ROOT / ".env.example").read_text(), re.M))
    fields = {f"RELAY_{name.upper()}" for name in Settings.model_fields}
    assert documented == fields
    documented_page = (ROOT / "docs" / "settings.md").read_text()
    missing = sorted(n for n in fields if n not in documented_page)
    assert not missing, f"settings missing from docs/settings.md: {missing}"


def test_openapi_json_is_fresh() -> None:
    committed = (ROOT / "openapi.json").read_text()
    assert committed == render(), "openapi.json is stale: run `make openapi`"
    paths = json.loads(committed)["paths"]
    assert {"/github/webhook", "/healthz", "/readyz", "/api/v1/deliveries"} <= set(paths)


def test_the_image_copies_every_package_it_installs() -> None:
    """`pip install .` in the Dockerfile installs what setuptools finds in the image's /app: a
    package the Dockerfile does not copy (the migrations, the relay role) would be missing."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in config["tool"]["setuptools"]["packages"]["find"]["include"]}
    copied = set(re.findall(r"^COPY (\S+) \1$", (ROOT / "Dockerfile").read_text(), re.M))
    assert {"migrations", "store", "fanout"} <= packages
    assert copied == packages
