"""Training-loop overhead: the aifab ``lm`` recipe vs a raw hand-written PyTorch loop.

Same causal LM (a Llama config), same tokenizer and packed blocks, same optimizer, schedule,
clipping, batch size and torch threads, in one process. The recipe's step time is what it
reports itself: its loop's wall time without evaluation and checkpoints (so data, steps, MLflow
logging and progress are included); the raw loop is timed the same way. Each repeat runs both
(alternating order) after a warm-up; the median of repeats is printed with the ratio (goal
<= 1.03), the ratio of the best repeats (less sensitive to other processes on a shared machine),
and the MFU of both against this machine's measured float32 matmul peak (``torch.mm``).

    .venv/bin/python bench/train_overhead.py --steps 50 --repeats 7 --threads 1
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CORPUS = Path(__file__).resolve().parents[1] / "examples" / "llm" / "data" / "corpus.jsonl"


def matmul_peak(n: int = 2048, repeats: int = 5) -> float:
    """Best float32 FLOP/s of ``torch.mm`` on ``n x n`` matrices."""
    import torch

    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)  # warm-up
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


def model_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The causal-lm zoo config both sides train."""
    return {
        "preset": "tiny",
        "hidden_size": args.hidden,
        "layers": args.layers,
        "heads": args.hidden // 64,
        "kv_heads": args.hidden // 64,
        "intermediate_size": args.hidden * 8 // 3,
        "max_position_embeddings": max(256, args.block),
    }


def recipe_config(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "dataset": "corpus",
        "model": model_settings(args),
        "vocab_size": 512,
        "block_size": args.block,
        "batch_size": args.batch,
        "max_steps": args.steps,
        "eval_every": args.steps,  # no periodic eval inside the timed loop
        "threads": args.threads,
        "optim": {"lr": 3e-3, "weight_decay": 0.1, "warmup_steps": 5, "min_lr_ratio": 0.1},
        "progress": False,
    }


def prepare(args: argparse.Namespace) -> tuple[Any, Any]:
    """The tokenizer and train blocks, built exactly as the recipe builds them."""
    from aifab.data import resolve
    from aifab.models.tokenizer import train_bpe_tokenizer
    from aifab.train.text_data import lm_blocks, split_texts

    texts = split_texts(resolve("corpus"), "text", "split", seed=0)
    tokenizer = train_bpe_tokenizer(texts["train"], 512)
    return tokenizer, lm_blocks(tokenizer, texts, args.block).blocks["train"]


def raw_loop(args: argparse.Namespace, tokenizer: Any, blocks: Any) -> tuple[float, int]:
    """The baseline: transformers model + torch AdamW/LambdaLR, written out by hand."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    m = model_settings(args)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=m["hidden_size"],
            intermediate_size=m["intermediate_size"],
            num_hidden_layers=m["layers"],
            num_attention_heads=m["heads"],
            num_key_value_heads=m["kv_heads"],
            max_position_embeddings=m["max_position_embeddings"],
            tie_word_embeddings=True,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
        )
    )
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)

    def factor(step: int) -> float:
        if step < 5:
            return (step + 1) / 5
        progress = min(1.0, (step - 5) / max(1, args.steps - 5))
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    model.train()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        x = blocks[torch.randint(len(blocks), (args.batch,))]
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
    return (time.perf_counter() - t0) / args.steps, sum(p.numel() for p in model.parameters())


def aifab_recipe(args: argparse.Namespace) -> float:
    from aifab.train.recipes.lm import main

    return float(main(recipe_config(args))["metrics"]["step_time_s"])


def flops_per_step(args: argparse.Namespace, params: int, vocab: int) -> float:
    """Training FLOPs of one step: 6 x non-embedding params + attention, per token (PaLM)."""
    non_embedding = params - vocab * args.hidden  # the output head is tied to the embedding
    per_token = 6 * non_embedding + 12 * args.layers * args.hidden * args.block
    return per_token * args.batch * args.block


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--block", type=int, default=64)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--json", action="store_true", help="Print one JSON object.")
    args = parser.parse_args()
    os.environ["AIFAB_HOME"] = tempfile.mkdtemp(prefix="aifab-bench-")
    import torch

    from aifab.data import ingest

    torch.set_num_threads(args.threads)
    ingest("corpus", str(CORPUS))
    tokenizer, blocks = prepare(args)
    peak = matmul_peak()
    # Warm-up: first calls pay for allocator growth and lazy imports on both sides.
    raw_loop(argparse.Namespace(**{**vars(args), "steps": 5}), tokenizer, blocks)
    aifab_recipe(argparse.Namespace(**{**vars(args), "steps": 5}))
    raw_times, aifab_times, params = [], [], 0
    for i in range(args.repeats):
        for side in ("raw", "aifab") if i % 2 == 0 else ("aifab", "raw"):
            if side == "raw":
                step, params = raw_loop(args, tokenizer, blocks)
                raw_times.append(step)
            else:
                aifab_times.append(aifab_recipe(args))
    raw, ours = statistics.median(raw_times), statistics.median(aifab_times)
    flops = flops_per_step(args, params, len(tokenizer))
    result = {
        "parameters": params,
        "tokens_per_step": args.batch * args.block,
        "threads": args.threads,
        "matmul_peak_gflops": peak / 1e9,
        "raw_step_ms": raw * 1e3,
        "aifab_step_ms": ours * 1e3,
        "ratio": ours / raw,
        "ratio_of_best": min(aifab_times) / min(raw_times),
        "raw_mfu": flops / raw / peak,
        "aifab_mfu": flops / ours / peak,
    }
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"model: {params / 1e6:.2f}M params, {args.batch}x{args.block} tokens/step, "
        f"{args.threads} threads, {args.steps} steps x {args.repeats} repeats"
    )
    print(f"matmul peak (float32 torch.mm 2048^2): {peak / 1e9:.1f} GFLOP/s")
    print(f"raw PyTorch loop : {raw * 1e3:8.1f} ms/step   MFU {result['raw_mfu']:.1%}")
    print(f"aifab lm recipe  : {ours * 1e3:8.1f} ms/step   MFU {result['aifab_mfu']:.1%}")
    print(f"ratio aifab/raw  : {ours / raw:.3f}   (goal <= 1.03; medians)")
    print(f"ratio of the best repeats: {result['ratio_of_best']:.3f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
