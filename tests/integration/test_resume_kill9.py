"""Exact resume: a deterministic classify run SIGKILLed after a checkpoint, then rerun with the
same config and checkpoint directory, ends with weights bitwise equal to an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from aifab.data import ingest

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux processes"),
]


def _dataset(tmp_path: Path) -> None:
    g = np.random.default_rng(0)
    x = g.normal(size=(400, 12)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] - x[:, 2] > 0).astype(np.int64)
    cols = {f"f{i}": x[:, i] for i in range(12)}
    pq.write_table(pa.table({**cols, "y": y}), tmp_path / "toy.parquet")
    ingest("toy", str(tmp_path / "toy.parquet"))


def _config(tmp_path: Path) -> Path:
    cfg = {
        "dataset": "toy",
        "label": "y",
        "epochs": 40,  # 40 x 13 batches / accumulation 2 = 280 optimizer steps
        "batch_size": 24,
        "optim": {"lr": 3e-3, "warmup_steps": 10, "grad_accum": 2, "clip_norm": 0.5},
        "model": {"config": {"hidden": [128, 128], "dropout": 0.2}},
        "eval_every": 7,
        "early_stopping": {"metric": "valid_loss", "patience": 1000},
        "checkpoint_every": 10,
        "deterministic": True,
        "seed": 3,
        "log_every": 3,
        "system_metrics": False,
        "progress": False,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def _start(
    config: Path, out: Path, ckpt: Path | None, log: Path, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "aifab.train.recipes.classify", str(config), f"output_dir={out}"]
    if ckpt is not None:
        args.append(f"checkpoint_dir={ckpt}")
    with open(log, "wb") as fh:
        return subprocess.Popen(args, stdout=fh, stderr=subprocess.STDOUT, env=env)


def _weights(model_dir: Path) -> dict[str, object]:
    from safetensors.torch import load_file

    return load_file(str(model_dir / "model.safetensors"))


def _finish(proc: subprocess.Popen[bytes], log: Path) -> dict[str, object]:
    assert proc.wait(timeout=240) == 0, log.read_text()[-3000:]
    return json.loads(log.read_text().strip().splitlines()[-1])


def test_kill9_then_rerun_matches_uninterrupted_bitwise(tmp_path: Path) -> None:
    import torch

    _dataset(tmp_path)
    config = _config(tmp_path)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    # The reference run gets its own MLflow DB so the two first runs do not race to create one.
    ref_env = {**env, "AIFAB_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow-ref.db'}"}
    ckpt = tmp_path / "ckpt"
    ref = _start(config, tmp_path / "ref", None, tmp_path / "ref.log", ref_env)
    victim = _start(config, tmp_path / "resumed", ckpt, tmp_path / "victim.log", env)
    try:
        deadline = time.monotonic() + 240
        while not any(ckpt.glob("step-*.pt")):
            assert victim.poll() is None, (tmp_path / "victim.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "no checkpoint appeared"
            time.sleep(0.01)
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=30)
        log = (tmp_path / "victim.log").read_text()[-3000:]
        assert victim.returncode == -signal.SIGKILL, f"the run ended before it was killed: {log}"
        killed_at = max(int(p.name[5:14]) for p in ckpt.glob("step-*.pt"))
        assert killed_at < 280

        rerun = _start(config, tmp_path / "resumed", ckpt, tmp_path / "rerun.log", env)
        resumed = _finish(rerun, tmp_path / "rerun.log")
        reference = _finish(ref, tmp_path / "ref.log")
    finally:
        for proc in (ref, victim):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert resumed["resumed_from"] == killed_at and reference["resumed_from"] is None
    assert resumed["steps"] == reference["steps"] == 280
    want, got = _weights(tmp_path / "ref"), _weights(tmp_path / "resumed")
    assert want.keys() == got.keys()
    for key in want:
        assert torch.equal(want[key], got[key]), key  # type: ignore[arg-type]
    # Every metric but the wall-clock step time is a function of the weights and the data.
    untimed = [
        {k: v for k, v in run["metrics"].items() if not k.endswith("_time_s")}
        for run in (resumed, reference)
    ]
    assert untimed[0] == untimed[1]

    from aifab.track.runs import get_run

    run = get_run(str(resumed["run_id"]))  # the rerun continued the killed run
    assert run["status"] == "FINISHED"
    assert run["metrics"]["test_accuracy"] == reference["metrics"]["test_accuracy"]  # type: ignore[index]
