"""Multimodal: fusion training step, text-to-image recall and one-image serving, each beside
its baseline, in one run on the example's parcels (examples/multimodal).

* train step: the ``classify`` recipe (modality multimodal: cnn + transformer + mlp branches)
  vs a hand-written PyTorch loop of the same zoo model on the same arrays, optimizer, schedule,
  clipping, batch and threads. The recipe's figure is its own ``step_time_s`` (loop wall time
  without evaluation and checkpoints: batching, logging and progress included); the raw loop
  is timed the same way. Median of repeats, alternating order (goal: ratio <= 1.05).
* recall: the ``contrastive`` recipe's dual encoder, text-to-image recall@1/@10 on the test
  split (each caption's image among all test images), beside random ranking and a caption
  TF-IDF baseline (the query's nearest training caption by TF-IDF; gallery images ranked by
  pixel distance to that caption's image).
* serving: one-record requests each carrying one 64x64 PNG (+ note + weight): aifab's
  classifier handler (decode with caps -> encode -> forward -> probabilities) vs a bare torch
  path (base64 + PIL decode/resize, tokenizer, forward, softmax), images/s, same thread.

    .venv/bin/python bench/multimodal.py                 # ~4 min on 2 busy cores
    .venv/bin/python bench/multimodal.py --quick         # fewer steps/repeats/epochs
"""

from __future__ import annotations

import argparse
import base64
import io
import math
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1] / "examples" / "multimodal" / "data" / "parcels.parquet"
FUSED = {
    "dataset": "parcels",
    "label": "route",
    "modality": "multimodal",
    "image_column": "image",
    "image_shape": [3, 32, 32],
    "text_column": "note",
    "features": ["weight_kg"],
    "vocab_size": 300,
    "max_length": 16,
    "batch_size": 64,
    "optim": {"lr": 0.003},
    "seed": 7,
    "progress": False,
    "system_metrics": False,
}


def recipe_step(steps: int, threads: int) -> tuple[float, dict[str, Any]]:
    from aifab.train.recipes.classify import main

    out = main({**FUSED, "max_steps": steps, "eval_every": steps, "threads": threads})
    return float(out["metrics"]["step_time_s"]), out


def raw_step(steps: int, threads: int, data: Any, model_cfg: dict[str, Any]) -> float:
    """The baseline: the same zoo model trained by a loop written out in plain PyTorch."""
    import numpy as np
    import torch

    from aifab.models.zoo import build_model

    torch.manual_seed(7)
    torch.set_num_threads(threads)
    model = build_model("fusion-classifier", model_cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=0.003, weight_decay=0.01)

    def factor(step: int) -> float:
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, step / max(1, steps))))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    train, labels = data.index["train"], torch.from_numpy(data.labels)
    model.train()
    t0, done, epoch = time.perf_counter(), 0, 0
    while done < steps:
        order = np.random.default_rng([7, epoch]).permutation(train)
        for start in range(0, len(order), 64):
            rows = order[start : start + 64]
            batch = {k: torch.from_numpy(v[rows]) for k, v in data.inputs.items()}
            loss = torch.nn.functional.cross_entropy(model(**batch), labels[rows])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            done += 1
            if done == steps:
                break
        epoch += 1
    return (time.perf_counter() - t0) / steps


def train_bench(args: argparse.Namespace) -> dict[str, float]:
    from aifab.models.checkpoint import read_sidecar
    from aifab.train.classification import load_data
    from aifab.train.recipes.classify import Config

    _, out = recipe_step(3, args.threads)  # warm-up; its sidecar has the resolved model config
    model_cfg = read_sidecar(out["model_dir"])["config"]
    data = load_data(Config(**FUSED))
    raw_step(3, args.threads, data, model_cfg)
    ours, raw = [], []
    for i in range(args.repeats):
        for side in ("raw", "aifab") if i % 2 == 0 else ("aifab", "raw"):
            if side == "raw":
                raw.append(raw_step(args.steps, args.threads, data, model_cfg))
            else:
                ours.append(recipe_step(args.steps, args.threads)[0])
    return {
        "raw_ms": statistics.median(raw) * 1e3,
        "aifab_ms": statistics.median(ours) * 1e3,
        "ratio": statistics.median(ours) / statistics.median(raw),
        "ratio_of_best": min(ours) / min(raw),
        "model_dir": out["model_dir"],
    }


def recall_bench(args: argparse.Namespace) -> dict[str, float]:
    import numpy as np
    import pyarrow.parquet as pq
    from sklearn.feature_extraction.text import TfidfVectorizer

    from aifab.models.inputs import image_files
    from aifab.train.recipes.contrastive import main

    out = main(
        {
            "dataset": "parcels",
            "text_column": "caption",
            "vocab_size": 300,
            "max_length": 16,
            "epochs": args.clip_epochs,
            "seed": 7,
            "threads": args.threads,
            "progress": False,
            "system_metrics": False,
        }
    )
    table = pq.read_table(DATA, columns=["image", "caption", "split"])
    split = np.asarray(table.column("split").to_pylist())
    captions = np.asarray(table.column("caption").to_pylist())
    train, test = np.flatnonzero(split == "train"), np.flatnonzero(split == "test")
    pixels = image_files(table.column("image").to_pylist(), 32, 3).reshape(len(split), -1)
    tfidf = TfidfVectorizer().fit(captions[train])
    sims = (tfidf.transform(captions[test]) @ tfidf.transform(captions[train]).T).toarray()
    proxy = pixels[train[sims.argmax(axis=1)]]  # the nearest training caption's image
    dist = ((proxy[:, None, :] - pixels[test][None, :, :]) ** 2).sum(axis=2)
    rank = (dist < dist.diagonal()[:, None]).sum(axis=1)
    return {
        "n": float(len(test)),
        "dual_r1": out["metrics"]["test_recall_at_1"],
        "dual_r10": out["metrics"]["test_recall_at_10"],
        "random_r1": 1 / len(test),
        "random_r10": 10 / len(test),
        "tfidf_r1": float((rank < 1).mean()),
        "tfidf_r10": float((rank < 10).mean()),
    }


def _png64(seed: int) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    rng = __import__("numpy").random.default_rng(seed)
    Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype="uint8")).save(buf, format="PNG")
    return buf.getvalue()


def serve_bench(args: argparse.Namespace, model_dir: str) -> dict[str, float]:
    import numpy as np
    import torch
    from PIL import Image

    from aifab.inference.classifier import ClassifierHandler
    from aifab.models.checkpoint import load_model, read_sidecar
    from aifab.models.tokenizer import load_tokenizer

    torch.set_num_threads(1)
    bodies = [
        {"image": base64.b64encode(_png64(i)).decode(), "note": "to oslo please", "weight_kg": 3.0}
        for i in range(args.requests)
    ]
    handler = ClassifierHandler()
    handler.setup(Path(model_dir), read_sidecar(model_dir), {"threads": 1})
    model, sidecar = load_model(model_dir)
    model.eval()
    tok = load_tokenizer(model_dir)
    std = sidecar["meta"]["preprocess"]["standardize"]

    def aifab(body: dict[str, Any]) -> Any:
        return handler.predict(handler.decode({"records": [body]}))

    def bare(body: dict[str, Any]) -> Any:
        with Image.open(io.BytesIO(base64.b64decode(body["image"]))) as im:
            arr = np.asarray(im.convert("RGB").resize((32, 32)), dtype=np.float32) / 255.0
        enc = tok([body["note"]], truncation=True, max_length=16, padding="max_length")
        x = (np.float32(body["weight_kg"]) - np.float32(std["mean"][0])) / np.float32(std["std"][0])
        with torch.inference_mode():
            logits = model(
                image=torch.from_numpy(arr.transpose(2, 0, 1)[None].copy()),
                input_ids=torch.tensor(enc["input_ids"]),
                attention_mask=torch.tensor(enc["attention_mask"]),
                features=torch.tensor([[x]]),
            )
        return torch.softmax(logits, dim=1).tolist()

    for fn in (aifab, bare):  # warm-up
        for body in bodies[:20]:
            fn(body)
    rates: dict[str, list[float]] = {"aifab": [], "bare": []}
    for i in range(args.repeats):
        for name, fn in (
            (("aifab", aifab), ("bare", bare))
            if i % 2
            else (
                ("bare", bare),
                ("aifab", aifab),
            )
        ):
            t0 = time.perf_counter()
            for body in bodies:
                fn(body)
            rates[name].append(len(bodies) / (time.perf_counter() - t0))
    ours, base = statistics.median(rates["aifab"]), statistics.median(rates["bare"])
    return {"aifab_ips": ours, "bare_ips": base, "ratio": ours / base}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--clip-epochs", type=int, default=10)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.repeats, args.clip_epochs, args.requests = 20, 3, 4, 100
    os.environ["AIFAB_HOME"] = tempfile.mkdtemp(prefix="aifab-bench-")
    from aifab.data import ingest

    ingest("parcels", str(DATA))
    load, cores = os.getloadavg()[0], os.cpu_count()
    print(f"machine: {cores} cores, load average {load:.1f} at start; {args.threads} thread(s)")
    t = train_bench(args)
    print(f"\ntrain step (fusion, batch 64, {args.steps} steps x {args.repeats} repeats)")
    print(f"  plain PyTorch loop : {t['raw_ms']:8.2f} ms/step")
    print(f"  aifab classify     : {t['aifab_ms']:8.2f} ms/step")
    print(f"  ratio aifab/raw    : {t['ratio']:.3f} (goal <= 1.05; medians)")
    print(f"  ratio of the best repeats: {t['ratio_of_best']:.3f}")
    r = recall_bench(args)
    print(f"\ntext-to-image recall, {int(r['n'])} held-out pairs ({args.clip_epochs} epochs)")
    labels = {"random": "random ranking", "tfidf": "caption TF-IDF", "dual": "aifab dual encoder"}
    for name, label in labels.items():
        print(f"  {label:20s}: recall@1 {r[name + '_r1']:.3f}  recall@10 {r[name + '_r10']:.3f}")
    s = serve_bench(args, t["model_dir"])
    print(f"\nserving: one 64x64 PNG per request ({args.requests} x {args.repeats}, 1 thread)")
    print(f"  bare torch path    : {s['bare_ips']:8.1f} images/s")
    print(f"  aifab handler      : {s['aifab_ips']:8.1f} images/s")
    print(f"  ratio aifab/bare   : {s['ratio']:.3f}")
    print(f"\nload average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
