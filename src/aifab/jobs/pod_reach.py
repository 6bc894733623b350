"""What a pod on a cluster can reach of the submitter's settings, and what it cannot.

A pod runs on another machine: an address of this machine's loopback interface names the pod
itself there, and a database or tracking store given as a local file is not in the pod. The
object store's endpoint and region are not secrets and travel as they are (MinIO needs them);
the DB URL carries a password and must come from a Kubernetes Secret.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from aifab.core.settings import get_settings

#: Where the object store is and which region it signs for: read by botocore/s3fs in the pod.
STORE_ENV = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION")
_LOOPBACK = ("localhost", "127.0.0.1", "::1", "0.0.0.0")


def store_env() -> dict[str, str]:
    """The object store's endpoint and region from this environment (with a store set)."""
    if not get_settings().storage_uri:
        return {}
    return {k: v for k in STORE_ENV if (v := os.environ.get(k))}


def _local(uri: str) -> str | None:
    """Why ``uri`` cannot be reached from another machine, or None."""
    parts = urlsplit(uri)
    host = (parts.hostname or "").lower()
    if host in _LOOPBACK or host.startswith("127."):
        return f"names this machine ({host}), which is the pod itself there"
    if parts.scheme in ("", "file", "sqlite") or uri.startswith("/"):
        return "is a file on this machine, not in the pod"
    return None


def reach_warnings(env: Mapping[str, Any], secret_names: set[str], *, recipe: bool) -> list[str]:
    """What pods given ``env`` (plus ``secret_names`` from Secrets) will not reach.

    A recipe job records its runs and results in the metadata DB; a plain command may not
    use aifab at all, so only a recipe job is warned about a missing DB URL.
    """
    out = []
    for name in ("AIFAB_TRACKING_URI", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        value = env.get(name)
        if isinstance(value, str) and (why := _local(value)):
            out.append(f"{name}={value} {why}: set it to an address the cluster's pods reach")
    if recipe and "AIFAB_DB_URL" not in secret_names and "AIFAB_DB_URL" not in env:
        out.append(
            "no pod.env_from_secrets entry gives AIFAB_DB_URL: each pod would use a SQLite DB "
            "of its own, and the job's runs and results would not reach the shared DB"
        )
    if recipe and "AIFAB_TRACKING_URI" not in secret_names and "AIFAB_TRACKING_URI" not in env:
        out.append(
            "AIFAB_TRACKING_URI is not set where the job is submitted: the pods would log their "
            "MLflow runs into their own workspace, lost with them"
        )
    return out
