"""Typed settings for every process (API, workers, CLI), read from `RELAY_*` environment variables.

Built on demand by :func:`get_settings`, never at import time. ``os.environ`` is read nowhere else
in library code: pass settings (or values taken from them) down instead.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

#: The secret a development instance signs and verifies with when none is configured.
#: Refused outside development, like any other placeholder.
DEVELOPMENT_WEBHOOK_SECRET = "development-webhook-secret"
_PLACEHOLDER_SECRETS = {"", DEVELOPMENT_WEBHOOK_SECRET, "changeme", "change-me", "secret"}

DEFAULT_VAR_DIR = Path("var")
#: the dispatch-token key of a development instance (refused outside development)
DEVELOPMENT_DISPATCH_SECRET = "development-dispatch-token-secret-not-for-production"
#: OIDC issuers whose tokens a callback may carry, with their JWKS (CRCR's providers)
DEFAULT_OIDC_ISSUERS = {
    "https://token.actions.githubusercontent.com": (
        "https://token.actions.githubusercontent.com/.well-known/jwks"
    ),
    "https://agent.buildkite.com": "https://agent.buildkite.com/.well-known/jwks",
}


class Settings(BaseSettings):
    """Every setting of the relay. See `.env.example` and the README for the documented list."""

    model_config = SettingsConfigDict(
        env_prefix="RELAY_", env_file=None, extra="ignore", validate_default=True
    )

    env: Literal["development", "production"] = "development"
    # this host's own folder (made absolute against the working folder when settings are built):
    # the embedded database and broker, every cache (inventory, envs, eval, selector, upstream
    # facts, torch_extensions of the workers), shard scratch; docs/production.md lists them
    var_dir: Path = DEFAULT_VAR_DIR
    # a read-only folder laid out like a var dir (another var dir of this host, or one baked into
    # an image): a keyed cache entry this var dir lacks is copied from it before it is built
    # (entries are keyed by what they depend on, so a copy is never stale); unset: built here
    cache_seed: Path | None = None
    database_url: str = ""
    broker_url: str = ""
    upstream_repo: str = "pytorch/pytorch"
    webhook_secrets: Annotated[list[SecretStr], NoDecode] = Field(default_factory=list)
    max_body_bytes: int = Field(default=25 * 1024 * 1024, gt=0)
    # all request bodies one API process reads at once (webhooks, callbacks, HUD ingest): a read
    # that would pass it is refused 503 with Retry-After
    max_bodies_in_flight_bytes: int = Field(default=32 * 1024 * 1024, gt=0)
    allowlist_path: Path | None = None
    # "module:function" callables run by the worker on every normalized upstream event
    event_handlers: Annotated[list[str], NoDecode] = Field(default_factory=list)
    sweep_after_seconds: int = Field(default=120, gt=0)
    # how often the outbox publisher looks for new deliveries when it cannot LISTEN (SQLite)
    publish_poll_seconds: float = Field(default=0.1, gt=0)
    log_level: str = "INFO"
    log_json: bool = True
    host: str = "127.0.0.1"
    port: int = 8000

    # --- the in-process runner (the downstream L2 integration for the bundled backend)
    runner_enabled: bool = True
    runner_repo: str = "local/spyre"  # the downstream identity of the in-process runner
    runner_workflow: str = "spyre-upstream-tests"
    runner_job_name: str = "spyre"
    # a PyTorch checkout to read upstream changes from (revisions are commits); unset: released
    # wheels (revisions are versions) and, for commit SHAs, the conservative whole-universe plan
    upstream_path: Path | None = None
    # released wheels and change facts (unset: ~/.cache/crcr-relay/upstream)
    upstream_cache: Path | None = None
    # the upstream under test (DESIGN.md): a pull request or push runs in an overlay of the head's
    # torch/**.py over this release's binaries (unset: the newest release tag the merge base
    # descends from in the checkout, else the installed torch); a wheel of the head
    # commit (a path or URL, "{sha}" and "{pr}" replaced) tests compiled changes too; without a
    # checkout or a head wheel nothing can test the change: the job concludes neutral, unless
    # smoke_untested runs it on the installed torch (labelled a smoke run)
    overlay_base: str | None = None
    head_wheel: str | None = None
    smoke_untested: bool = False
    # overlays no open job needs are removed by the sweeper once unused this long
    overlay_keep_seconds: float = Field(default=6 * 3600, ge=0)
    # PyTorch's public CI statistics (test-times.json, td_heuristic_profiling.json from
    # pytorch/test-infra's generated-stats branch); optional, used when its files exist (unset:
    # ~/.cache/crcr-relay/pytorch-ci-stats). Read at import by the commands' defaults: see
    # ci_stats_dir()
    ci_stats: Path | None = None
    # a release step also compares the OpInfo database's behaviour under both torches (each in
    # its own environment, made once; fingerprints cached per torch build): what compiled code
    # changed that no source diff shows. false: source facts only (no environment is made)
    release_fingerprints: bool = True
    # a job whose import map (learned once per torch build: 20+ minutes of a planner process)
    # is not learned yet queues its learning in the background (below the jobs' priority) for
    # the jobs after it; false: nothing is learned on this host (its maps come from
    # cache_seed, or from `relay replay` / `relay eval`, which learn it in the foreground)
    import_map_learning: bool = True
    # "module:function" (event, settings) -> RunPlan; unset: the selector's four stages over the
    # bundled universe on runner_backend (the default planner of the workers)
    planner: str | None = None
    runner_backend: str = "spyre"
    # spec files or folders applied to the tests; default: the backend's own (backends/spyre/specs/)
    runner_specs: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # shards are cut to about this many runner-seconds (a pull request waits at most one shard
    # for a worker); RELAY_RUNNER_SHARDS is the most shards one job is cut into
    runner_shard_seconds: float = Field(default=120.0, gt=0)
    runner_shards: int = Field(default=64, ge=1)
    # shard workers running at once (`relay up --workers N` sets it for its processes): a job
    # shorter than that many shards is cut into one shard per worker (each at least 20 s)
    runner_parallel: int = Field(default=1, ge=1)
    # `relay up` starts its Celery workers this much nicer than the web server (Unix niceness,
    # 0-19): on one machine the webhook answer (GitHub waits 10 s) comes before background work
    worker_nice: int = Field(default=5, ge=0, le=19)
    runner_budget_seconds: float | None = None  # runner-seconds; None: no cut
    # runner-minutes for an event the selector cannot analyse (no checkout to read its SHAs);
    # 0 or None: no cut (the whole universe)
    runner_unanalysed_budget_minutes: float | None = Field(default=30.0, ge=0)
    per_test_timeout: float = Field(default=300.0, gt=0)
    job_timeout_seconds: int = Field(default=6 * 3600, gt=0)
    warm_pool: bool = True
    # a shard worker process starts the default runner's warm pool when it boots (logs "warm
    # pool ready"), so the first shard does not pay torch's import; off for stacks whose jobs
    # all run another recipe (the sample suite's tests)
    warm_pool_at_boot: bool = True
    # warm pools a shard worker keeps, one per upstream environment in use (least recently used
    # closed first)
    warm_pool_envs: int = Field(default=2, ge=1)
    # test modules a warm pool keeps collected (each shard child forks one); 0: collect per child
    # 0 by default: measured (500 variants over 6 conformance files, 2026-12-02), a server
    # collects its whole module first, so one shard took 45.5 s with 2 servers against 31.9 s
    # without (plain pytest 30.6 s), and 4 shards of 125 took 175.6 s (2 servers thrash over 6
    # files) against 71.6 s; with a server per file (8) they took 74.0 s: servers pay off only
    # from about 5 shards per worker, at the memory of one collected module each
    module_servers: int = Field(default=0, ge=0)
    shard_lease_seconds: int = Field(default=30, ge=2)  # a dead worker's shard is retaken after it
    # owners that may take a shard whose worker died or whose task raised (the sweeper returns it
    # to pending when its lease expires); then it fails with the reason and its job concludes
    shard_attempts: int = Field(default=3, ge=1)
    # the full failure text of a failing test, stored with its result, is cut to this many bytes
    failure_text_max_bytes: int = Field(default=64 * 1024, ge=1024)
    # a shard's scratch folder (RELAY_VAR_DIR/runs/job-N/shard-I-attempt-K: event files, child
    # logs) is removed when its shard is stored; > 0: kept this long, for debugging on that host
    runs_keep_seconds: int = Field(default=0, ge=0)
    # a planner renews its plan's lease while it works; the sweeper re-queues a plan whose lease
    # expired (its worker was killed) or whose message was lost, and fails the job with the
    # reason once RELAY_PLAN_ATTEMPTS planners started it and none finished
    plan_lease_seconds: int = Field(default=60, ge=2)
    plan_attempts: int = Field(default=3, ge=1)
    # PR events that supersede earlier runs of the same PR (cancel their pending shards)
    cancel_superseded: bool = True
    # CRCR callback (downstream -> relay); unset: results only in the local HUD rows
    callback_url: str | None = None
    callback_token: SecretStr | None = None
    public_url: str = "http://127.0.0.1:8000"  # used for run URLs in callbacks
    # on first start (no job yet), `relay up` replays this release step ("2.13:2.14"); empty: none
    demo_replay: str = "2.13:2.14"
    # crontab (UTC, "minute hour day month weekday") of the nightly run; empty: none
    nightly_cron: str = "0 2 * * *"

    # --- the relay role (fanout/): CRCR's allowlist (a file or an http(s) URL) and our policy
    # file; unset allowlist: no downstream but the in-process runner
    allowlist_source: str | None = None
    policy_path: Path | None = None
    allowlist_reload_seconds: float = Field(default=5.0, ge=0)
    github_api_url: str = "https://api.github.com"
    # GitHub App (installation tokens minted from the app id and its private key, PEM) or a token
    github_app_id: str | None = None
    github_app_private_key: SecretStr | None = None
    github_token: SecretStr | None = None
    # signs the dispatch token in every client_payload (HS256); refused as a placeholder in production
    dispatch_token_secret: SecretStr = SecretStr(DEVELOPMENT_DISPATCH_SECRET)
    dispatch_max_attempts: int = Field(default=8, ge=1)
    dispatch_backoff_seconds: float = Field(default=2.0, ge=0)
    dispatch_backoff_max_seconds: float = Field(default=600.0, ge=0)
    dispatch_timeout_seconds: float = Field(default=10.0, gt=0)
    # callbacks: OIDC issuers accepted (issuer -> JWKS URL, a JSON object) and the audience
    oidc_issuers: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=lambda: dict(DEFAULT_OIDC_ISSUERS)
    )
    oidc_audience: str = "pytorch-cross-repo-ci-relay"
    # a token with an unknown key id fetches the issuer's JWKS again, at most this often
    oidc_jwks_refresh_seconds: float = Field(default=30.0, ge=0)
    # a token valid longer than this (exp - iat) is refused (GitHub's live 5-10 minutes)
    oidc_max_lifetime_seconds: float = Field(default=3600.0, gt=0)
    callback_rate_per_minute: int = Field(default=100, ge=1)
    # the HUD ingest's bot token and the operator token (retries over HTTP); unset: refused
    hud_bot_token: SecretStr | None = None
    operator_token: SecretStr | None = None

    @field_validator("webhook_secrets", mode="before")
    @classmethod
    def _parse_secrets(cls, value: object) -> object:
        return _json_list(value, "RELAY_WEBHOOK_SECRETS")

    @field_validator("runner_specs", mode="before")
    @classmethod
    def _parse_specs(cls, value: object) -> object:
        return _json_list(value, "RELAY_RUNNER_SPECS")

    @field_validator("event_handlers", mode="before")
    @classmethod
    def _parse_handlers(cls, value: object) -> object:
        return _json_list(value, "RELAY_EVENT_HANDLERS")

    @field_validator("var_dir", mode="after")
    @classmethod
    def _absolute_var_dir(cls, value: Path) -> Path:
        return value.expanduser().absolute()

    @field_validator("cache_seed", mode="before")
    @classmethod
    def _seed(cls, value: object) -> object:
        if isinstance(value, str):
            return Path(value).expanduser().absolute() if value.strip() else None
        return value

    @field_validator(
        "allowlist_source",
        "policy_path",
        "github_app_id",
        "github_app_private_key",
        "github_token",
        "hud_bot_token",
        "operator_token",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("oidc_issuers", mode="before")
    @classmethod
    def _parse_issuers(cls, value: object) -> object:
        if isinstance(value, str):
            try:
                parsed = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"RELAY_OIDC_ISSUERS must be a JSON object: {exc}") from exc
            if not isinstance(parsed, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in parsed.items()
            ):
                raise ValueError("RELAY_OIDC_ISSUERS must map issuer URLs to JWKS URLs")
            return parsed
        return value

    @model_validator(mode="after")
    def _defaults_and_production_rules(self) -> Settings:
        if not self.database_url:
            self.database_url = f"sqlite:///{(self.var_dir / 'relay.sqlite').as_posix()}"
        if not self.broker_url:
            self.broker_url = f"sqla+sqlite:///{(self.var_dir / 'broker.sqlite').as_posix()}"
        if self.env == "production":
            values = [s.get_secret_value() for s in self.webhook_secrets]
            if not values:
                raise ValueError(
                    "RELAY_WEBHOOK_SECRETS must list at least one secret in production"
                )
            bad = [i for i, v in enumerate(values) if v.strip().lower() in _PLACEHOLDER_SECRETS]
            if bad:
                raise ValueError(
                    f"RELAY_WEBHOOK_SECRETS entry {bad[0]} is a placeholder; refused in production"
                )
            dispatch = self.dispatch_token_secret.get_secret_value().strip().lower()
            weak = dispatch in _PLACEHOLDER_SECRETS | {DEVELOPMENT_DISPATCH_SECRET}
            if self.allowlist_location is not None and (weak or len(dispatch) < 32):
                # the relay role signs dispatch tokens: a known key would let anyone forge them
                raise ValueError(
                    "RELAY_DISPATCH_TOKEN_SECRET must be a secret of at least 32 characters "
                    "in production"
                )
        elif not self.webhook_secrets:
            self.webhook_secrets = [SecretStr(DEVELOPMENT_WEBHOOK_SECRET)]
        return self

    @property
    def allowlist_location(self) -> str | None:
        """RELAY_ALLOWLIST_SOURCE (a path or URL), else RELAY_ALLOWLIST_PATH, else None."""
        if self.allowlist_source:
            return self.allowlist_source
        return str(self.allowlist_path) if self.allowlist_path is not None else None

    @property
    def outbox_claim_seconds(self) -> float:
        """How long a sender holds an outbox row it claimed (a dispatch or a check run): three
        GitHub calls' timeouts and a margin, after which another sender may take the row."""
        return self.dispatch_timeout_seconds * 3 + 30

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    def secret_values(self) -> list[bytes]:
        return [s.get_secret_value().encode() for s in self.webhook_secrets]


def _json_list(value: object, name: str) -> object:
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return []
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{name} must be a JSON list of strings: {exc}") from exc
        if not isinstance(parsed, list) or not all(isinstance(v, str) for v in parsed):
            raise ValueError(f"{name} must be a JSON list of strings")
        return parsed
    return value


def ci_stats_dir() -> Path:
    """The folder of PyTorch's public CI statistics: ``RELAY_CI_STATS``, else the user's cache.

    Read from the environment (not through :func:`get_settings`) because the commands' option
    defaults and the selector's defaults are computed when they are imported, before any setting is
    validated. Nothing needs the folder: a missing file means no per-file prior and no coverage
    prior, and the commands say so in ``--help``.
    """
    configured = os.environ.get("RELAY_CI_STATS", "").strip()
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "crcr-relay" / "pytorch-ci-stats"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, built on first use."""
    return Settings()


def reset_settings_cache() -> None:
    get_settings.cache_clear()
