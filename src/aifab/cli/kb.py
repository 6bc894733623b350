"""``aifab kb``: knowledge bases: create, add, remove, search, ask, eval, lineage."""

from __future__ import annotations

import sys
import time
from typing import Any

import typer

from aifab.cli.output import JSON_HELP, emit, when

app = typer.Typer(help="Knowledge bases: documents indexed for search and cited answers.")

_FROM_HELP = (
    "A file or folder (txt, md, html, pdf; png/jpg images, captioned by a captions.csv), or "
    "with --text-column a dataset NAME[@V]."
)
_CHAT_HELP = "An LM deployment name (run in this process) or an OpenAI-compatible base URL."
_MODE_HELP = "dense (meaning), bm25 (keywords) or hybrid (both, rank-fused)."
_FILTER_HELP = "Metadata filter KEY=VALUE (repeatable), e.g. type=md or document=README.md."


def _progress() -> Any:
    """A ``progress(stage, done, total)`` printing to stderr at most twice a second."""
    last_t, last_stage = 0.0, ""

    def report(stage: str, done: int, total: int) -> None:
        nonlocal last_t, last_stage
        now = time.monotonic()
        if stage != last_stage or done >= total or now - last_t > 0.5:
            sys.stderr.write(f"{stage}: {done}/{total}\n")
            last_t, last_stage = now, stage

    return report


def _filters(items: list[str] | None) -> dict[str, str] | None:
    from aifab.core.errors import InvalidInputError

    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InvalidInputError(f"--filter {item!r}: expected KEY=VALUE")
        out[key.strip()] = value
    return out or None


def _built(kb: dict[str, Any], as_json: bool) -> None:
    if as_json:
        emit(kb, True)
        return
    c = kb["counts"]
    sys.stdout.write(
        f"{kb['name']}@{kb['version']}: {c['documents']} documents, {c['chunks']} chunks "
        f"({c['embedded']} embedded, {c['reused']} reused, {c['dense_kind']} index) "
        f"in {c['seconds']:.1f} s\n"
    )
    for q in kb["quarantine"]:
        sys.stdout.write(f"quarantined {q['document']}: {q['reason']}\n")


@app.command("create")
def create_command(
    name: str = typer.Argument(..., help="Knowledge base name.", show_default=False),
    source: str = typer.Option(..., "--from", help=_FROM_HELP),
    text_column: str | None = typer.Option(None, "--text-column", help="Dataset text column."),
    id_column: str | None = typer.Option(None, "--id-column", help="Dataset document ids."),
    image_column: str | None = typer.Option(
        None, "--image-column", help="Dataset column of image bytes (one image per row)."
    ),
    embedder: str | None = typer.Option(
        None, "--embedder", help="Embedding model (for images: a dual encoder NAME@VERSION)."
    ),
    chunk_tokens: int = typer.Option(160, "--chunk-tokens", help="Tokens per chunk."),
    chunk_overlap: int = typer.Option(32, "--chunk-overlap", help="Tokens of overlap."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Build a knowledge base; unreadable documents are quarantined with their reason."""
    from aifab.rag import create_kb

    config: dict[str, Any] = {"chunk_tokens": chunk_tokens, "chunk_overlap": chunk_overlap}
    if embedder:
        config["embedder"] = embedder
    kb = create_kb(
        name,
        source,
        text_column=text_column,
        id_column=id_column,
        config=config,
        progress=_progress(),
        image_column=image_column,
    )
    _built(kb, as_json)


@app.command("add")
def add_command(
    name: str = typer.Argument(..., help="Knowledge base name.", show_default=False),
    source: str = typer.Option(..., "--from", help=_FROM_HELP),
    text_column: str | None = typer.Option(None, "--text-column", help="Dataset text column."),
    id_column: str | None = typer.Option(None, "--id-column", help="Dataset document ids."),
    image_column: str | None = typer.Option(
        None, "--image-column", help="Dataset column of image bytes (one image per row)."
    ),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Add (or replace) documents: a new version, embedding only what is new."""
    from aifab.rag import add_documents

    kb = add_documents(
        name,
        source,
        text_column=text_column,
        id_column=id_column,
        progress=_progress(),
        image_column=image_column,
    )
    _built(kb, as_json)


@app.command("remove")
def remove_command(
    name: str = typer.Argument(..., help="Knowledge base name.", show_default=False),
    document: list[str] = typer.Option(..., "--document", help="Document id (repeatable)."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Remove documents: a new version, nothing re-embedded."""
    from aifab.rag import delete_documents

    _built(delete_documents(name, document), as_json)


@app.command("delete")
def delete_command(
    name: str = typer.Argument(..., help="Knowledge base name.", show_default=False),
) -> None:
    """Forget a knowledge base and delete its index files."""
    from aifab.rag import delete_kb

    delete_kb(name)
    sys.stdout.write(f"deleted {name}\n")


@app.command("list")
def list_command(as_json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> None:
    """Every knowledge base with its version and counts."""
    from aifab.rag import list_kbs

    rows = list_kbs()
    if as_json:
        emit(rows, True)
        return
    shown = [
        {
            **r,
            "documents": r["counts"]["documents"],
            "chunks": r["counts"]["chunks"],
            "updated": when(r["updated_at"]),
        }
        for r in rows
    ]
    emit(shown, False, ["name", "version", "documents", "chunks", "embedder", "updated"])


@app.command("show")
def show_command(
    name: str = typer.Argument(..., help="Knowledge base name.", show_default=False),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """One knowledge base: settings, counts and quarantined documents."""
    from aifab.rag import get_kb

    kb = get_kb(name)
    emit(
        kb
        if as_json
        else {**kb, "created_at": when(kb["created_at"]), "updated_at": when(kb["updated_at"])},
        as_json,
        title=name,
    )


@app.command("lineage")
def lineage_command(
    name: str = typer.Argument(..., help="Knowledge base name.", show_default=False),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Every version: what it was built from (dataset versions, file digests) and with what."""
    from aifab.rag import kb_lineage

    rows = kb_lineage(name)
    if as_json:
        emit(rows, True)
        return
    shown = [
        {
            "version": v["version"],
            "parent": v["parent"],
            "embedder": v["embedder"],
            "sources": ", ".join(f"{s['kind']}:{s['ref']}" for s in v["sources"]),
            "chunks": v["counts"]["chunks"],
            "created": when(v["created_at"]),
        }
        for v in rows
    ]
    emit(shown, False)


def _read_image(path: str) -> bytes:
    """An image query file's bytes, refused by size before it is read."""
    from pathlib import Path

    from aifab.core.errors import InvalidInputError, NotFoundError
    from aifab.inference.multimodal import MAX_IMAGE_BYTES

    file = Path(path).expanduser()
    if not file.is_file():
        raise NotFoundError(f"--image {path}: no such file")
    if file.stat().st_size > MAX_IMAGE_BYTES:
        raise InvalidInputError(
            f"--image {path}: {file.stat().st_size} bytes is over max_image_bytes "
            f"({MAX_IMAGE_BYTES})"
        )
    return file.read_bytes()


def _shown(hit: dict[str, Any]) -> dict[str, Any]:
    text = hit["text"][:120].replace("\n", " ")
    if hit.get("image"):  # an image document: its size, then its caption (if any)
        meta = hit["metadata"]
        text = f"[image {meta.get('width')}x{meta.get('height')}] {text}".strip()
    return {**hit, "text": text}


@app.command("search")
def search_command(
    name: str = typer.Argument(..., help="Knowledge base name.", show_default=False),
    query: str = typer.Argument(
        "", help="What to look for (or --image / --like).", show_default=False
    ),
    k: int = typer.Option(5, "-k", help="Results (1-100)."),
    mode: str = typer.Option("hybrid", "--mode", help=_MODE_HELP),
    filter_: list[str] | None = typer.Option(None, "--filter", help=_FILTER_HELP),
    rerank: str | None = typer.Option(None, "--rerank", help="A local cross-encoder dir."),
    image: str | None = typer.Option(
        None, "--image", help="An image file: find images like it (a dual-encoder KB)."
    ),
    like: str | None = typer.Option(None, "--like", help="A document id: find ones like it."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Search a knowledge base by meaning, keywords or both; by an image in an image KB."""
    from aifab.rag import search

    out = search(
        name,
        query,
        k=k,
        mode=mode,
        filters=_filters(filter_),
        rerank=rerank,
        image=_read_image(image) if image else None,
        like=like,
    )
    if as_json:
        emit(out, True)
        return
    if not out["results"]:
        sys.stdout.write("no results\n")
        return
    images = all(h.get("image") for h in out["results"])  # no positions or headings to show
    columns = (
        ["score", "document", "text"]
        if images
        else ["score", "document", "position", "heading", "text"]
    )
    emit([_shown(h) for h in out["results"]], False, columns)


def _note(facts: dict[str, Any]) -> None:
    """Say on stderr what was changed to fit the model (stdout stays the answer)."""
    if facts.get("note"):
        sys.stderr.write(f"note: {facts['note']}\n")


@app.command("ask")
def ask_command(
    name: str = typer.Argument(..., help="Knowledge base name.", show_default=False),
    question: str = typer.Argument(..., help="The question.", show_default=False),
    chat: str = typer.Option(..., "--chat", help=_CHAT_HELP),
    prompt: str = typer.Option("kb-answer", "--prompt", help="Registered prompt to fill."),
    k: int = typer.Option(4, "-k", help="Sources to retrieve."),
    mode: str = typer.Option("hybrid", "--mode", help=_MODE_HELP),
    redact: bool = typer.Option(False, "--redact", help="Redact PII from what is shown."),
    stream: bool = typer.Option(False, "--stream", help="Print the answer as it comes."),
    max_tokens: int = typer.Option(256, "--max-tokens", help="Longest answer in tokens."),
    timeout_s: float = typer.Option(60.0, "--timeout", help="Deadline of the chat call, s."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """Answer a question from a knowledge base, citing the chunks it used."""
    from aifab.rag import ask, ask_stream

    opts: dict[str, Any] = dict(
        chat=chat,
        prompt=prompt,
        k=k,
        mode=mode,
        redact=redact,
        max_tokens=max_tokens,
        timeout_s=timeout_s,
    )
    if stream and not as_json:
        citations: list[dict[str, Any]] = []
        for event in ask_stream(name, question, **opts):
            if event["type"] == "citations":
                citations = event["citations"]
                _note(event)
            elif event["type"] == "delta":
                sys.stdout.write(event["text"])
                sys.stdout.flush()
        sys.stdout.write("\n")
        _cite(citations)
        return
    out = ask(name, question, **opts)
    _note(out)
    if as_json:
        emit(out, True)
        return
    sys.stdout.write(out["answer"].strip() + "\n")
    _cite(out["citations"])
    t = out["timings_ms"]
    sys.stdout.write(
        f"({out['model']}; retrieval {t['retrieval']:.0f} ms, "
        f"generation {t['generation']:.0f} ms)\n"
    )


def _cite(citations: list[dict[str, Any]]) -> None:
    for c in citations:
        sys.stdout.write(f"[{c['n']}] {c['document']} #{c['position']} (score {c['score']:.4g})\n")


@app.command("eval")
def eval_command(
    name: str = typer.Argument(..., help="Knowledge base name.", show_default=False),
    qa: str = typer.Option(..., "--qa", help="QA file (JSONL or YAML): question, expected."),
    k: int = typer.Option(5, "-k", help="Recall cut-off."),
    as_json: bool = typer.Option(False, "--json", help=JSON_HELP),
) -> None:
    """recall@k, MRR and nDCG@10 for dense, BM25 and hybrid side by side (logged to MLflow)."""
    from aifab.rag import eval_kb

    out = eval_kb(name, qa, k=k)
    if as_json:
        emit(out, True)
        return
    emit([{"mode": m, **v} for m, v in out["metrics"].items()], False)
    sys.stdout.write(
        f"{out['questions']} questions on {name}@{out['version']}; MLflow run {out['run_id']}\n"
    )
