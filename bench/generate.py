"""LM generation: tokens/s through the aifab server vs ``model.generate`` in-process.

The model is the zoo's ``causal-lm`` preset ``small`` (~12.6M parameters, untrained weights:
throughput does not depend on what they say) with a BPE tokenizer trained on the LLM example's
corpus, saved as a model directory and deployed from it. Three contenders, same prompts, greedy
(temperature 0), the same number of new tokens and the same torch threads:

- ``hf``: transformers ``model.generate`` on the loaded model (KV cache, greedy), in-process;
- ``handler``: aifab's own generation loop (``LMHandler.predict``), in-process;
- ``server``: ``POST /v1/completions`` (stream off) on a real uvicorn server on 127.0.0.1,
  one request at a time, and ``--clients`` concurrent requests (dynamic batching on:
  ``--batch`` items per forward pass); the concurrent baseline is ``model.generate`` on the
  same prompts as one left-padded batch.

Tokens/s counts generated tokens (usage.completion_tokens on the server). Each figure is the
median of ``--repeats`` runs after a warm-up (contenders take turns within each repeat).
Printed: each contender and the ratios.

    .venv/bin/python bench/generate.py --tokens 64 --repeats 5 --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

CORPUS = Path(__file__).resolve().parents[1] / "examples" / "llm" / "data" / "corpus.jsonl"
PROMPTS = [
    "Once upon a time in the village, the baker",
    "The farmer counted the cows in the field and",
    "On Monday it rained, so the children",
    "The dog said woof and the cat",
    "Anna lives next to the mill where",
    "In winter the river freezes and the people",
    "The teacher asked how many apples",
    "Every morning the old man walks to",
]


def build_model(home: Path, vocab: int) -> Path:
    """Save an untrained ``small`` causal LM with a corpus-trained tokenizer; return its dir."""
    from aifab.models.checkpoint import save_model
    from aifab.models.tokenizer import train_bpe_tokenizer
    from aifab.models.zoo import build_model as zoo_build

    texts = [json.loads(line)["text"] for line in CORPUS.open(encoding="utf-8")]
    tokenizer = train_bpe_tokenizer(texts, vocab)
    config = {"preset": "small", "vocab_size": vocab}
    model = zoo_build("causal-lm", config)
    return save_model(
        home / "bench-lm", model, builder="causal-lm", config=config, tokenizer=tokenizer
    )


def median_rates(runners: dict[str, Callable[[], int]], repeats: int) -> dict[str, float]:
    """Median tokens/s of each runner (returning the tokens it generated), after a warm-up.

    Runners take turns within each repeat, so load from other processes hits all of them alike.
    """
    for run in runners.values():
        run()
    rates: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(repeats):
        for name, run in runners.items():
            t0 = time.perf_counter()
            tokens = run()
            rates[name].append(tokens / (time.perf_counter() - t0))
    return {name: statistics.median(r) for name, r in rates.items()}


def hf_generate(model: Any, tokenizer: Any, prompts: list[str], tokens: int) -> Callable[[], int]:
    """``model.generate`` on ``prompts`` as one left-padded batch, exactly ``tokens`` new each."""
    import torch

    tokenizer.padding_side = "left"
    enc = tokenizer(prompts, return_tensors="pt", padding=True)

    def run() -> int:
        with torch.inference_mode():
            out = model.generate(
                **enc,
                max_new_tokens=tokens,
                min_new_tokens=tokens,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id,
            )
        return int((out.shape[1] - enc["input_ids"].shape[1]) * len(prompts))

    return run


def handler_generate(handler: Any, prompts: list[str], tokens: int) -> Callable[[], int]:
    """aifab's generation loop in-process (``LMHandler.predict``), greedy."""
    from aifab.inference.generation import GenerationParams

    params = GenerationParams(max_tokens=tokens, temperature=0.0)
    requests = [handler.request(p, params) for p in prompts]

    def run() -> int:
        return sum(r.completion_tokens for r in handler.predict(requests))

    return run


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server() -> tuple[Any, threading.Thread, str]:
    import httpx
    import uvicorn

    from aifab.serve.app import create_app

    port = free_port()
    config = uvicorn.Config(
        create_app(), host="127.0.0.1", port=port, log_level="warning", log_config=None
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while True:
        try:
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return server, thread, url
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit("server not ready after 300 s")
        time.sleep(0.1)


def server_generate(
    url: str, key: str, model: str, prompts: list[str], tokens: int
) -> Callable[[], int]:
    """``prompts`` sent concurrently (one request each) to ``/v1/completions``."""
    import httpx

    clients = [
        httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=600)
        for _ in prompts
    ]
    pool = ThreadPoolExecutor(len(prompts))

    def one(i: int) -> int:
        body = {"model": model, "prompt": prompts[i], "max_tokens": tokens, "temperature": 0}
        r = clients[i].post("/v1/completions", json=body)
        r.raise_for_status()
        return int(r.json()["usage"]["completion_tokens"])

    def run() -> int:
        return sum(pool.map(one, range(len(prompts))))

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=64, help="New tokens per request.")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (all sides).")
    parser.add_argument("--clients", type=int, default=8, help="Concurrent requests.")
    parser.add_argument("--batch", type=int, default=8, help="Server max batch size.")
    parser.add_argument("--vocab", type=int, default=2048, help="Tokenizer vocabulary.")
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="aifab-bench-generate-"))
    try:
        run(args, home)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def run(args: argparse.Namespace, home: Path) -> None:
    """Build, deploy and measure everything in the workspace ``home``; print the figures."""
    os.environ["AIFAB_HOME"] = str(home / "ws")
    os.environ.setdefault("AIFAB_ACTOR", "user:bench")
    import torch

    torch.set_num_threads(args.threads)
    from aifab.inference.deployments import create_deployment
    from aifab.inference.loading import load_served_model
    from aifab.models.checkpoint import load_model
    from aifab.serve.keys import create_key

    model_dir = build_model(home, args.vocab)
    model, _ = load_model(model_dir)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    handler = load_served_model(str(model_dir)).handler
    many = (PROMPTS * (args.clients // len(PROMPTS) + 1))[: args.clients]

    create_deployment(str(model_dir), name="one")
    create_deployment(str(model_dir), name="batched", max_batch_size=args.batch, max_wait_ms=5)
    _, secret = create_key("client", rate=None)
    server, thread, url = start_server()
    c, t = args.clients, args.tokens
    runners = {
        "hf x1": hf_generate(model, tokenizer, many[:1], t),
        "handler x1": handler_generate(handler, many[:1], t),
        "server x1": server_generate(url, secret, "one", many[:1], t),
        f"hf batch x{c}": hf_generate(model, tokenizer, many, t),
        f"server x{c} (batch {args.batch})": server_generate(url, secret, "batched", many, t),
        f"server x{c} (no batching)": server_generate(url, secret, "one", many, t),
    }
    try:
        results = median_rates(runners, args.repeats)
    finally:
        server.should_exit = True
        thread.join(timeout=60)

    print(
        f"causal-lm small ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M params), "
        f"{args.tokens} new tokens/request, greedy, torch threads={args.threads}, "
        f"median of {args.repeats}"
    )
    for name, rate in results.items():
        print(f"  {name:32s} {rate:8.1f} tokens/s")
    print(f"  server/hf (1 request)            {results['server x1'] / results['hf x1']:8.2f}x")
    print(f"  handler/hf (1 request)           {results['handler x1'] / results['hf x1']:8.2f}x")
    batched = results[f"server x{c} (batch {args.batch})"]
    print(f"  server batched/hf batch (x{c})    {batched / results[f'hf batch x{c}']:8.2f}x")
    print(f"  server batched/server x1         {batched / results['server x1']:8.2f}x")


if __name__ == "__main__":
    main()
