"""``aifab serve``: the gateway and every deployment behind it (plus the jobs worker)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add ``aifab serve`` to the root app."""

    @app.command("serve")
    def serve(
        host: str = typer.Option("127.0.0.1", "--host", help="Interface to bind."),
        port: int = typer.Option(8000, "--port", help="TCP port."),
        no_worker: bool = typer.Option(
            False, "--no-worker", help="Do not run queued jobs in this process."
        ),
        log_sample: float = typer.Option(
            1.0, "--log-sample", help="Share of successful requests kept in the request log."
        ),
        reconcile_interval: float = typer.Option(
            1.0, "--reconcile-interval", help="Seconds between re-reading the deployments."
        ),
        access_log: bool = typer.Option(False, "--access-log", help="Log one line per request."),
        workers: int = typer.Option(
            1,
            "--workers",
            help="Server processes sharing the port (rate limits, quotas and metrics stay "
            "exact across them).",
        ),
    ) -> None:
        """Serve every deployment under /v1 (OpenAPI docs at /docs, metrics at /metrics).

        Prints "aifab ready on URL: ..." once every deployment has loaded (or failed);
        `aifab deployments wait` waits for the same moment from another shell.
        """
        from aifab.core.errors import InvalidInputError
        from aifab.serve.keys import list_keys
        from aifab.serve.server import serve as run

        if not 0.0 <= log_sample <= 1.0:
            raise InvalidInputError(f"--log-sample {log_sample}: expected 0 to 1")
        if not 0 < port < 65536:
            raise InvalidInputError(f"--port {port}: expected 1 to 65535")
        if not 1 <= workers <= 64:
            raise InvalidInputError(f"--workers {workers}: expected 1 to 64")
        if not [k for k in list_keys() if not k.get("revoked_at")]:
            typer.echo(
                "hint: no API keys yet; every route but /healthz, /readyz and /metrics needs "
                "one: create one with `aifab keys create --role admin`",
                err=True,
            )
        _check_port_free(host, port)
        typer.echo(f"aifab serving on http://{host}:{port} (docs at /docs)", err=True)
        run(
            host,
            port,
            worker=not no_worker,
            reconcile_interval_s=reconcile_interval,
            request_log_sample=log_sample,
            access_log=access_log,
            workers=workers,
            # stdout, so `aifab serve | grep -m1 ready` or a script reading it can wait on it.
            on_ready=typer.echo,
        )


def _check_port_free(host: str, port: int) -> None:
    """Refuse a port something already listens on, before saying "serving on" it.

    Raises:
        InvalidInputError: the address is taken (naming ``--port``) or cannot be bound.
    """
    import errno
    import socket

    from aifab.core.errors import InvalidInputError

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # As uvicorn binds: SO_REUSEADDR lets a port in TIME_WAIT be reused, not a listening one.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise InvalidInputError(
                    f"--port {port}: {host}:{port} is already in use (another `aifab serve`?); "
                    "pass another --port"
                ) from None
            raise InvalidInputError(
                f"--host {host}: cannot bind {host}:{port} ({exc.strerror})"
            ) from None
