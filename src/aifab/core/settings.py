"""Process settings read from ``AIFAB_*`` environment variables."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Where aifab keeps its state and which backends it talks to."""

    model_config = SettingsConfigDict(env_prefix="AIFAB_", frozen=True, extra="ignore")

    home: Path = Field(Path(".aifab"), description="Workspace directory holding all local state.")
    db_url: str | None = Field(
        None, description="SQLAlchemy URL of the metadata DB; default SQLite in the workspace."
    )
    tracking_uri: str | None = Field(
        None, description="MLflow tracking URI; default an MLflow SQLite DB in the workspace."
    )
    storage_uri: str | None = Field(
        None,
        description="Where every byte outside the metadata DB lives (lake, artifacts, indexes, "
        "exports, logs): s3://bucket/prefix (also gs://, az://); default the workspace directory.",
    )
    ray_node_home: str = Field(
        "/tmp/aifab-ray",
        description="With a storage URI, the directory on each Ray node under which a job's "
        "replicas keep their node-local workspace (<job>/attempt-N/replica-R, removed when the "
        "replica ends; the store holds the rest).",
    )
    redis_url: str | None = Field(
        None,
        description="Redis server (redis://host:6379/0) holding the gateways' rate-limit and "
        "failed-sign-in buckets; default: the metadata DB when it is PostgreSQL, else each "
        "machine's own.",
    )
    actor: str | None = Field(None, description="Who is acting, for the audit log (CLI).")
    duckdb_memory_limit: str | None = Field(
        None, description="Memory cap for DuckDB queries, e.g. 2GB (default: DuckDB's, 80% of RAM)."
    )
    duckdb_threads: int | None = Field(None, description="DuckDB threads; default all cores.")
    worker_processes: int = Field(
        2,
        ge=0,
        description="Worker processes that decode images, render templates and run agents' SQL "
        "for the server; 0 runs that work in the server's own process, without its limits "
        "(for measuring the pool's cost only).",
    )
    worker_memory_mb: int = Field(
        1536,
        ge=256,
        description="Address-space limit of each worker process, in MiB; a task over it fails "
        "and its worker is replaced.",
    )
    worker_per_key: int = Field(
        1, ge=1, description="Tasks one API key may have in the worker pool at once."
    )
    audit_key: SecretStr | None = Field(
        None, description="HMAC key of the audit chain (default: the workspace's audit.key file)."
    )
    metrics_token: SecretStr | None = Field(
        None,
        description="Bearer token a Prometheus scraper sends to read /metrics in full (key ids, "
        "deployment, monitor and rule names); without it /metrics shows only aggregates.",
    )
    model_roots: str | None = Field(
        None,
        description="Directories (separated by ':') that deployments may load model directories "
        "from; default: the workspace. Registry refs and builtins need none.",
    )
    max_columns: int = Field(
        2048, ge=1, description="Most columns a pushed record or a dataset schema change may have."
    )

    @property
    def resolved_home(self) -> Path:
        """The workspace directory as an absolute path."""
        return self.home.expanduser().resolve()

    @property
    def resolved_model_roots(self) -> tuple[Path, ...]:
        """The directories model directories must be under, absolute."""
        if not self.model_roots:
            return (self.resolved_home,)
        parts = [p for p in self.model_roots.split(os.pathsep) if p.strip()]
        return tuple(Path(p).expanduser().resolve() for p in parts)

    @property
    def team_db(self) -> bool:
        """Whether the metadata DB is a server that several machines share (not SQLite)."""
        return not self.resolved_db_url.startswith("sqlite")

    @property
    def resolved_db_url(self) -> str:
        """The metadata DB URL, defaulting to ``aifab.db`` inside the workspace."""
        return self.db_url or f"sqlite:///{self.resolved_home / 'aifab.db'}"


_cache: dict[tuple[tuple[str, str], ...], Settings] = {}


def get_settings() -> Settings:
    """Settings for the current ``AIFAB_*`` environment (re-read whenever it changes)."""
    key = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AIFAB_")))
    settings = _cache.get(key)
    if settings is None:
        # Building the pydantic object costs milliseconds; every DB session asks for it.
        settings = _cache[key] = Settings()
    return settings
