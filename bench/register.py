"""Registering a model version: aifab (an MLflow model with pyfunc + pytorch flavors) vs MLflow.

Baseline: ``MlflowClient.create_model_version`` on the run's files (what aifab did before its
versions were MLflow models). Same run, same store; median of 5 after one warm-up.
Run: PYTHONPATH=src python bench/register.py
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ["AIFAB_HOME"] = tempfile.mkdtemp(prefix="bench-register-") + "/ws"
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from aifab.pipeline.runner import run_pipeline  # noqa: E402
from aifab.track import get_client, register_model, resolve_model  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def median_s(fn, repeats: int = 5) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    assert run_pipeline(EXAMPLES / "quickstart" / "pipeline.yaml").ok
    run_id = resolve_model("churn@champion")["run_id"]
    client = get_client()
    client.create_registered_model("bench-mlflow")
    baseline = median_s(
        lambda: client.create_model_version("bench-mlflow", f"runs:/{run_id}/model", run_id)
    )
    ours = median_s(lambda: register_model(run_id, "model", "bench-aifab"))
    print(f"mlflow create_model_version (files only): {baseline * 1000:8.1f} ms")
    print(f"aifab register_model (MLflow model):      {ours * 1000:8.1f} ms")
    print(f"ratio aifab/mlflow: {ours / baseline:.1f}x")


if __name__ == "__main__":
    main()
