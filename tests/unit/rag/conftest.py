"""Fixtures of the RAG tests: a small document folder and a scripted chat endpoint.

``chat_standin`` is a STAND-IN for an external OpenAI-compatible chat API (none can exist
here): a real uvicorn server on 127.0.0.1 that records each request and answers from a script.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

DOCS: dict[str, str] = {
    "guide/install.md": "# Installing\n\nRun `pip install aifab` in a fresh virtual "
    "environment. Python 3.11 or newer is required.\n\n## GPUs\n\nCUDA wheels are optional; "
    "the CPU build of torch works everywhere.\n",
    "guide/deploy.md": "# Deploying models\n\nUse `aifab deploy churn@champion` to serve a "
    "registered model behind the gateway. A canary takes a percentage of traffic with "
    "--canary and --weight.\n",
    "guide/keys.md": "# API keys\n\nCreate a key with `aifab keys create --role client`. "
    "Clients may invoke models; developers may also deploy them. Contact admin@example.com "
    "or call 555-123-4567 for a key.\n",
    "notes.txt": "The lake stores dataset versions as immutable Parquet files queried with "
    "DuckDB. Versions are content addressed.\n",
    "page.html": "<html><head><style>p{}</style><script>alert(1)</script></head><body>"
    "<h1>Pipelines</h1><p>A pipeline YAML chains steps; <b>aifab run</b> skips steps whose "
    "inputs did not change.</p></body></html>",
}


def pdf_bytes(text: str) -> bytes:
    """A minimal valid one-page PDF showing ``text`` (offsets computed, so pypdf reads it)."""
    stream = f"BT /F1 12 Tf 72 712 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for off in offsets:
        out += b"%010d 00000 n \n" % off
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def write_docs(root: Path, *, junk: bool = True) -> Path:
    """The document folder, with a PDF and (``junk``) files that must be quarantined."""
    for rel, text in DOCS.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    (root / "faq.pdf").write_bytes(pdf_bytes("Quotas limit tokens per day for each API key."))
    (root / ".hidden.md").write_text("# secret\n\nnot indexed", encoding="utf-8")
    if junk:
        (root / "broken.pdf").write_bytes(b"%PDF-1.4\n1 0 obj << /Type /Catalog")
        (root / "junk.txt").write_bytes(bytes(range(256)) * 8)
        (root / "empty.md").write_text("  \n\n", encoding="utf-8")
        (root / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    return root


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ChatStandIn:
    """The stand-in's URL, what it received, and how it should behave next."""

    url: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    #: "ok" | "error" (500) | "refuse" (400) | "slow" (sleeps ``delay_s``) | "garbage"
    mode: str = "ok"
    delay_s: float = 3.0
    reply: str = "The answer is in [1]."


def _standin_app(state: ChatStandIn) -> Any:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = await request.json()
        state.requests.append(body)
        if state.mode == "slow":
            await asyncio.sleep(state.delay_s)
        if state.mode == "error":
            return JSONResponse({"error": {"message": "overloaded"}}, status_code=500)
        if state.mode == "refuse":
            message = "This model's maximum context length is 64 tokens"
            return JSONResponse({"error": {"message": message}}, status_code=400)
        if state.mode == "garbage":
            return JSONResponse({"hello": "world"})
        if body.get("stream"):

            async def events() -> Any:
                for word in state.reply.split(" "):
                    delta = {"choices": [{"delta": {"content": word + " "}}]}
                    yield f"data: {json.dumps(delta)}\n\n"
                yield "data: [DONE]\n\n"

            return StreamingResponse(events(), media_type="text/event-stream")
        return {
            "model": body.get("model"),
            "choices": [{"message": {"role": "assistant", "content": state.reply}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5},
        }

    return app


@pytest.fixture(scope="module")
def chat_standin() -> Iterator[ChatStandIn]:
    """A scripted OpenAI-compatible chat server (stand-in for an external LLM API)."""
    import uvicorn

    port = _free_port()
    state = ChatStandIn(url=f"http://127.0.0.1:{port}/v1")
    config = uvicorn.Config(_standin_app(state), host="127.0.0.1", port=port, log_level="error")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/docs", timeout=1)
            break
        except httpx.TransportError:
            time.sleep(0.05)
    yield state
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture
def standin(chat_standin: ChatStandIn) -> ChatStandIn:
    """The module's stand-in, reset to answer normally."""
    chat_standin.mode = "ok"
    chat_standin.requests.clear()
    return chat_standin


@pytest.fixture
def make_pdf() -> Any:
    """:func:`pdf_bytes`."""
    return pdf_bytes


@pytest.fixture
def docs_folder(tmp_path: Path) -> Path:
    """The document folder, junk included."""
    return write_docs(tmp_path / "docs")


@pytest.fixture(scope="module")
def module_docs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The document folder (junk included), once per module."""
    return write_docs(tmp_path_factory.mktemp("docs"))
