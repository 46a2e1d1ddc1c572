from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from config.settings import DEVELOPMENT_WEBHOOK_SECRET, Settings


def test_defaults_are_embedded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in (
        "RELAY_DATABASE_URL",
        "RELAY_BROKER_URL",
        "RELAY_ENV",
        "RELAY_WEBHOOK_SECRETS",
        "RELAY_VAR_DIR",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    s = Settings()
    assert s.env == "development"
    assert s.var_dir == tmp_path / "var"  # made absolute against the working folder
    assert s.database_url == f"sqlite:///{tmp_path}/var/relay.sqlite"
    assert s.broker_url == f"sqla+sqlite:///{tmp_path}/var/broker.sqlite"
    assert s.upstream_repo == "pytorch/pytorch"
    assert [v.decode() for v in s.secret_values()] == [DEVELOPMENT_WEBHOOK_SECRET]


def test_secrets_are_a_json_list_and_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELAY_WEBHOOK_SECRETS", '["old", "new"]')
    s = Settings()
    assert s.secret_values() == [b"old", b"new"]
    assert "old" not in repr(s)


def test_secrets_not_json_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELAY_WEBHOOK_SECRETS", "old,new")
    with pytest.raises(ValidationError, match="RELAY_WEBHOOK_SECRETS must be a JSON list"):
        Settings()


@pytest.mark.parametrize("secrets", ["[]", f'["{DEVELOPMENT_WEBHOOK_SECRET}"]', '["changeme"]'])
def test_production_refuses_empty_or_placeholder_secrets(
    monkeypatch: pytest.MonkeyPatch, secrets: str
) -> None:
    monkeypatch.setenv("RELAY_ENV", "production")
    monkeypatch.setenv("RELAY_WEBHOOK_SECRETS", secrets)
    with pytest.raises(ValidationError, match="RELAY_WEBHOOK_SECRETS"):
        Settings()


def test_production_accepts_real_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELAY_ENV", "production")
    monkeypatch.setenv("RELAY_WEBHOOK_SECRETS", '["a-long-random-secret"]')
    assert Settings().secret_values() == [b"a-long-random-secret"]


def test_var_dir_moves_the_embedded_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RELAY_DATABASE_URL", raising=False)
    monkeypatch.delenv("RELAY_BROKER_URL", raising=False)
    monkeypatch.setenv("RELAY_VAR_DIR", "/srv/relay")
    s = Settings()
    assert s.database_url == "sqlite:////srv/relay/relay.sqlite"
    assert s.broker_url == "sqla+sqlite:////srv/relay/broker.sqlite"


def test_importing_the_app_builds_nothing() -> None:
    import subprocess
    import sys

    # With an invalid environment, import must still succeed: settings are built on demand.
    code = "import relay.app, workers.celery_app, workers.ingest; print('ok')"
    env = {"RELAY_ENV": "production", "RELAY_WEBHOOK_SECRETS": "[]", "PATH": ""}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr


def test_production_relay_role_needs_a_real_dispatch_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RELAY_ENV", "production")
    monkeypatch.setenv("RELAY_WEBHOOK_SECRETS", '["a-long-random-secret"]')
    monkeypatch.setenv("RELAY_ALLOWLIST_SOURCE", "/etc/relay/allowlist.yml")
    with pytest.raises(ValidationError, match="RELAY_DISPATCH_TOKEN_SECRET"):
        Settings()
    monkeypatch.setenv("RELAY_DISPATCH_TOKEN_SECRET", "x" * 40)
    assert Settings().dispatch_token_secret.get_secret_value() == "x" * 40
