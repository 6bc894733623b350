"""``aifab prompts``: versioned prompt templates: create, list, show, render, alias, eval."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from aifab.cli.output import JSON_HELP, emit, when

app = typer.Typer(help="Prompt templates: versioned, sandboxed Jinja2, evaluated on datasets.")

_REF_HELP = "NAME, NAME@VERSION or NAME@ALIAS (NAME alone is the latest version)."
_LIST_COLUMNS = ["name", "version", "variables", "aliases", "created_by", "created_at"]


def _read(path: Path) -> str:
    from aifab.core.errors import InvalidInputError

    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidInputError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"{path}: cannot read as UTF-8 text ({exc})") from None


def _pairs(items: list[str] | None) -> dict[str, str]:
    from aifab.core.errors import InvalidInputError

    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InvalidInputError(f"--set {item!r}: expected NAME=VALUE")
        out[key.strip()] = value
    return out


@app.command("create")
def create_command(
    name: str = typer.Argument(..., help="Prompt name.", show_default=False),
    file: Path = typer.Option(..., "-f", "--file", help="The Jinja2 template file."),
    var: list[str] | None = typer.Option(
        None, "--var", help="Declare a variable (repeatable; default: those the template uses)."
    ),
    description: str = typer.Option("", "--description", help="Free text."),
    alias: str | None = typer.Option(None, "--alias", help="Point NAME@ALIAS at this version."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Register a new immutable version of a prompt (unchanged content: no new version)."""
    from aifab.prompts import create_prompt

    p = create_prompt(name, _read(file), variables=var, description=description, alias=alias)
    emit(p if as_json else {**p, "created_at": when(p["created_at"])}, as_json, title=p["ref"])


@app.command("list")
def list_command(
    name: str | None = typer.Argument(None, help="List this prompt's versions."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Every prompt's latest version, or all versions of one prompt."""
    from aifab.prompts import list_prompts

    rows = list_prompts(name)
    shown = rows if as_json else [{**r, "created_at": when(r["created_at"])} for r in rows]
    emit(shown, as_json, _LIST_COLUMNS)


@app.command("show")
def show_command(
    ref: str = typer.Argument(..., help=_REF_HELP, show_default=False),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Show one prompt version: template, variables, aliases."""
    from aifab.prompts import get_prompt

    p = get_prompt(ref)
    emit(p if as_json else {**p, "created_at": when(p["created_at"])}, as_json, title=p["ref"])


@app.command("render")
def render_command(
    ref: str = typer.Argument(..., help=_REF_HELP, show_default=False),
    set_: list[str] | None = typer.Option(None, "--set", help="NAME=VALUE (repeatable)."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Render a prompt with its variables (missing or extra ones are named)."""
    from aifab.prompts import render_prompt

    out = render_prompt(ref, _pairs(set_))
    if as_json:
        emit(out, True)
    else:
        sys.stdout.write(out["text"] + ("" if out["text"].endswith("\n") else "\n"))


@app.command("alias")
def alias_command(
    name: str = typer.Argument(..., help="Prompt name.", show_default=False),
    alias: str = typer.Argument(..., help="Alias, e.g. prod.", show_default=False),
    version: int = typer.Argument(..., help="Version the alias points at.", show_default=False),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Point NAME@ALIAS at a version (audited)."""
    from aifab.prompts import set_prompt_alias

    p = set_prompt_alias(name, alias, version)
    emit(p if as_json else {"alias": f"{name}@{alias}", "version": p["version"]}, as_json)


@app.command("eval")
def eval_command(
    ref: str = typer.Argument(..., help=_REF_HELP, show_default=False),
    data: str = typer.Option(..., "--data", help="Dataset NAME[@VERSION] of inputs."),
    chat: str = typer.Option(..., "--chat", help="LM deployment name or OpenAI base URL."),
    expected: str = typer.Option("expected", "--expected", help="Column of expected answers."),
    scorer: list[str] | None = typer.Option(
        None, "--scorer", help="exact | contains | regex | embedding (repeatable)."
    ),
    max_tokens: int = typer.Option(64, "--max-tokens", help="Longest answer in tokens."),
    timeout_s: float = typer.Option(60.0, "--timeout", help="Deadline of one chat call, s."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Score a prompt version through a chat model over a dataset; logs an MLflow run."""
    from aifab.prompts import eval_prompt

    out = eval_prompt(
        ref,
        data,
        chat,
        expected_column=expected,
        scorers=scorer or ["exact", "contains"],
        max_tokens=max_tokens,
        timeout_s=timeout_s,
    )
    if as_json:
        emit(out, True)
        return
    emit([{"scorer": k, "mean": v} for k, v in out["scores"].items()], False)
    sys.stdout.write(f"{out['rows']} rows of {out['dataset']}; MLflow run {out['run_id']}\n")
