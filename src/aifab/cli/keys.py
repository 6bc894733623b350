"""``aifab keys``: the gateway's API keys (create, list, revoke) and their dashboard sessions."""

from __future__ import annotations

import sys
from typing import Any

import typer

from aifab.cli.output import JSON_HELP, emit, when

keys_app = typer.Typer(help="API keys of the gateway: roles, rate limits, quotas.")

_KEY_COLUMNS = ["id", "name", "prefix", "role", "rate", "token_quota", "status", "created", "used"]
_ROLE_HELP = "admin (everything), developer (deploy, call, read), viewer (read), client (call)."
_RATE_HELP = "Requests allowed, e.g. 600/min, 10/s, 1000/h, or none."
_QUOTA_HELP = "Model tokens per UTC day, e.g. 100000/day, or none."
_DATASETS_HELP = "Client keys: datasets it may push records to, e.g. 'sensors*,events' (none)."


def _row(key: dict[str, Any]) -> dict[str, Any]:
    rate = key["rate_per_min"]
    quota = key["token_quota_day"]
    return {
        **key,
        "rate": "none" if rate is None else f"{rate:g}/min",
        "token_quota": "none" if quota is None else f"{quota}/day",
        "status": "active" if key["active"] else f"revoked {when(key['revoked_at'])}",
        "created": when(key["created_at"]),
        "used": when(key["last_used_at"]),
    }


@keys_app.command("create")
def create_command(
    role: str = typer.Option(..., "--role", help=_ROLE_HELP, show_default=False),
    name: str = typer.Option("", "--name", help="A label for people (need not be unique)."),
    rate: str = typer.Option("600/min", "--rate", help=_RATE_HELP),
    token_quota: str = typer.Option("none", "--token-quota", help=_QUOTA_HELP),
    team: str | None = typer.Option(None, "--team", help="Team charged for its traffic."),
    project: str | None = typer.Option(None, "--project", help="Project charged for it."),
    datasets: str = typer.Option("", "--datasets", help=_DATASETS_HELP),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Create a key and print its secret: it is stored hashed and cannot be shown again."""
    from aifab.serve.keys import create_key

    key, secret = create_key(
        role,
        name=name,
        rate=rate,
        token_quota=token_quota,
        team=team,
        project=project,
        datasets=datasets,
    )
    if as_json:
        emit({**key, "secret": secret}, True)
        return
    emit([_row(key)], False, _KEY_COLUMNS[:-1])
    sys.stdout.write(f"secret: {secret}\n")
    sys.stdout.write("warning: store this secret now; it will not be shown again\n")


@keys_app.command("list")
def list_command(as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """List keys (ids, prefixes, roles, limits; never secrets or hashes)."""
    from aifab.serve.keys import list_keys

    rows = list_keys()
    emit(rows if as_json else [_row(r) for r in rows], as_json, _KEY_COLUMNS)


@keys_app.command("revoke")
def revoke_command(
    key_id: str = typer.Argument(..., help="Key id (see 'aifab keys list').", show_default=False),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Revoke a key: running servers refuse it within a second."""
    from aifab.serve.keys import revoke_key

    key = revoke_key(key_id)
    if as_json:
        emit(key, True)
        return
    sys.stdout.write(f"revoked key {key['id']} ({key['name'] or key['prefix']})\n")


@keys_app.command("sign-out")
def sign_out_command(
    key_id: str | None = typer.Argument(
        None, help="End this key's dashboard sessions.", show_default=False
    ),
    everyone: bool = typer.Option(False, "--all", help="End every dashboard session."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """End dashboard sessions on the server: a copy of their cookies stops working at once."""
    from aifab.core.errors import InvalidInputError
    from aifab.serve.sessions import end_sessions

    if (key_id is None) == (not everyone):
        raise InvalidInputError("give a KEY_ID or --all (not both)")
    ended = end_sessions(None if everyone else key_id)
    if as_json:
        emit({"ended": ended}, True)
        return
    whose = "every key" if everyone else f"key {key_id}"
    sys.stdout.write(f"{ended} dashboard sessions ended ({whose})\n")


def register(app: typer.Typer) -> None:
    """Add the ``keys`` group to ``app``."""
    app.add_typer(keys_app, name="keys", no_args_is_help=True)
