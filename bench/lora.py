"""LoRA fine-tuning: LoRA vs full fine-tuning of the same model, and the aifab ``lora`` recipe vs
PEFT called directly.

The base is the zoo's ``causal-lm`` preset ``small`` (~12.6M parameters), saved as a model
directory with a BPE tokenizer; the data is the LLM example's instruction set, chat-formatted
with loss on the assistant's replies. Each contender runs in its own subprocess (so its peak RSS
is its own) on the same batches, threads and steps:

- ``full``: every parameter trainable, AdamW, a hand-written loop;
- ``peft``: ``peft.get_peft_model`` (r=8 on q/k/v/o) + AdamW, a hand-written loop;
- ``aifab``: the ``lora`` recipe with the same adapters (its samples/s is its loop's wall time
  without evaluation: data, steps and MLflow logging included).

Printed: trainable share, peak RSS and samples/s of each, LoRA/full ratios, and aifab/PEFT
samples/s (goal >= 0.95x). Each subprocess makes a warm-up run, then ``--repeats`` timed runs
(median samples/s).

    .venv/bin/python bench/lora.py --steps 20 --repeats 3 --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "llm" / "data"
LORA = {
    "r": 8,
    "alpha": 16,
    "dropout": 0.05,
    "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
}
BATCH, MAX_LENGTH, LR = 8, 128, 1e-3


def prepare(home: Path) -> Path:
    """Ingest the instructions and save the ``small`` base with its tokenizer; return its dir."""
    from aifab.data import ingest
    from aifab.models.checkpoint import save_model
    from aifab.models.tokenizer import train_bpe_tokenizer
    from aifab.models.zoo import build_model

    ingest("instructions", str(EXAMPLES / "instructions.jsonl"))
    texts = [json.loads(line)["text"] for line in (EXAMPLES / "corpus.jsonl").open()]
    tokenizer = train_bpe_tokenizer(texts, 2048)
    model = build_model("causal-lm", {"preset": "small"})
    return save_model(
        home / "base", model, builder="causal-lm", config={"preset": "small"}, tokenizer=tokenizer
    )


def batches(base: Path, steps: int) -> list[dict[str, Any]]:
    """The training batches every contender sees, in order (as the recipe draws them)."""
    from aifab.data import resolve
    from aifab.models.tokenizer import load_tokenizer
    from aifab.train.text_data import chat_splits, collate, encode_chats, stream_batch

    tokenizer = load_tokenizer(base)
    train = chat_splits(resolve("instructions"), "split", seed=0)["train"]
    examples, _ = encode_chats(tokenizer, train, MAX_LENGTH)
    return [
        collate([examples[i] for i in stream_batch(len(examples), s, BATCH, seed=0)], 0)
        for s in range(steps)
    ]


def hand_loop(model: Any, data: list[dict[str, Any]]) -> float:
    """AdamW over the trainable parameters, one step per batch; returns samples/s."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=LR, weight_decay=0.0)
    model.train()
    t0 = time.perf_counter()
    for batch in data:
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return sum(len(b["input_ids"]) for b in data) / (time.perf_counter() - t0)


def run_once(name: str, base: Path, steps: int, threads: int) -> dict[str, Any]:
    """One training run of contender ``name``: samples/s and parameter counts."""
    if name == "aifab":
        from aifab.train.recipes.lora import main

        config = {
            "dataset": "instructions",
            "base": str(base),
            "lora": LORA,
            "batch_size": BATCH,
            "max_length": MAX_LENGTH,
            "max_steps": steps,
            "epochs": 1000,
            "optim": {"lr": LR, "weight_decay": 0.0},
            "threads": threads,
            "progress": False,
        }
        m = main(config)["metrics"]
        return {
            "samples_per_s": m["samples_per_s"],
            "trainable": m["trainable_parameters"],
            "total": m["total_parameters"],
        }
    from aifab.models.checkpoint import load_model

    data = batches(base, steps)
    model, _ = load_model(base)
    if name == "peft":
        from peft import LoraConfig, get_peft_model

        lora = LoraConfig(
            task_type="CAUSAL_LM",
            r=LORA["r"],
            lora_alpha=LORA["alpha"],
            lora_dropout=LORA["dropout"],
            target_modules=LORA["target_modules"],
        )
        model = get_peft_model(model, lora)
    rate = hand_loop(model, data)
    return {
        "samples_per_s": rate,
        "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "total": sum(p.numel() for p in model.parameters()),
    }


def worker(name: str, base: Path, steps: int, threads: int, repeats: int) -> dict[str, Any]:
    """A warm-up run, then ``repeats`` timed runs (median samples/s); peak RSS of the process."""
    import warnings

    import torch

    warnings.simplefilter("ignore", FutureWarning)  # PEFT calls a deprecated transformers API
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    run_once(name, base, 3, threads)  # first calls pay for lazy init and allocator growth
    runs = [run_once(name, base, steps, threads) for _ in range(repeats)]
    result = {**runs[0], "samples_per_s": statistics.median(r["samples_per_s"] for r in runs)}
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def spawn(name: str, base: Path, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        name,
        "--base",
        str(base),
        "--steps",
        str(args.steps),
        "--threads",
        str(args.threads),
        "--repeats",
        str(args.repeats),
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=os.environ)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--worker", choices=["full", "peft", "aifab"])
    parser.add_argument("--base", type=Path)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.base, args.steps, args.threads, args.repeats)))
        return
    home = Path(tempfile.mkdtemp(prefix="aifab-bench-"))
    os.environ["AIFAB_HOME"] = str(home / "ws")
    base = prepare(home)
    res = {name: spawn(name, base, args) for name in ("full", "peft", "aifab")}
    print(
        f"base: causal-lm 'small', {res['full']['total'] / 1e6:.1f}M parameters; batch {BATCH}, "
        f"{args.steps} steps, {args.threads} thread(s), median of {args.repeats}"
    )
    head = f"{'trainable':>12}{'share':>9}{'grad+Adam MB':>14}{'peak RSS MB':>13}"
    print(f"{'':22}{head}{'samples/s':>11}")
    for name, label in (
        ("full", "full fine-tuning"),
        ("peft", "LoRA, PEFT directly"),
        ("aifab", "LoRA, aifab recipe"),
    ):
        r = res[name]
        print(
            f"{label:22}{r['trainable']:>12,.0f}{r['trainable'] / r['total']:>9.2%}"
            f"{r['trainable'] * 12 / 2**20:>14.1f}"  # float32 gradient + Adam's two moments
            f"{r['peak_rss_mb']:>13.0f}{r['samples_per_s']:>11.1f}"
        )
    full, peft, ours = res["full"], res["peft"], res["aifab"]
    print(
        f"LoRA vs full: {peft['samples_per_s'] / full['samples_per_s']:.2f}x samples/s, "
        f"{peft['peak_rss_mb'] / full['peak_rss_mb']:.2f}x peak RSS"
    )
    print(
        f"aifab vs PEFT directly: {ours['samples_per_s'] / peft['samples_per_s']:.3f}x samples/s "
        "(goal >= 0.95)"
    )


if __name__ == "__main__":
    main()
