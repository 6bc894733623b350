"""Optional dependencies: import one, or fail with the ``pip install 'aifab[extra]'`` that adds it.

Cluster-only and heavy packages (ray, kubernetes, pykeen, psycopg) are extras of the wheel, so a
laptop install stays small; the feature that needs one names the extra.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from aifab.core.errors import AifabError

#: Module -> the aifab extra that installs it.
EXTRAS = {
    "ray": "ray",
    "grpc": "ray",  # Ray Client (ray://...) is ray[client]
    "kubernetes": "k8s",
    "pykeen": "kg",
    "psycopg": "postgres",
    "deltalake": "delta",
    "s3fs": "s3",
    "redis": "redis",
}


class MissingExtraError(AifabError):
    """A feature needs an optional package that is not installed."""


def require(module: str, feature: str) -> ModuleType:
    """Import ``module`` for ``feature``.

    Raises:
        MissingExtraError: it is not installed; the message names the extra to install.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".")[0]
        extra = EXTRAS.get(top, "all")
        raise MissingExtraError(
            f"{feature} needs {top}, which is not installed ({exc}): pip install 'aifab[{extra}]'"
        ) from None


#: Ray's logger for its token-authentication notices.
_RAY_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"


def quiet_ray_auth_notice() -> None:
    """Keep Ray's token-authentication notice of a new local instance off the user's terminal.

    With ``RAY_AUTH_MODE`` unset, Ray picks its own default for a local instance and logs a
    WARNING about it on every start, which a user of ``aifab`` cannot act on. The choice itself
    is left to Ray (and to ``RAY_AUTH_MODE`` where people set it); only the notice goes.
    """
    import logging

    logging.getLogger(_RAY_AUTH_LOGGER).setLevel(logging.ERROR)
