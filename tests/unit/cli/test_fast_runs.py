"""``runs list`` and ``models list`` read MLflow's SQLite store as MLflow does, without MLflow."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aifab.cli import fast_runs
from aifab.track import get_client, list_models, list_runs

SRC = Path(__file__).resolve().parents[3] / "src"
T0 = 1_700_000_000_000  # ms


@pytest.fixture(scope="module")
def store(module_workspace: Path) -> Path:
    """Runs and models shaped to catch a query that differs from MLflow's, made with MLflow."""
    client = get_client()
    a, b = client.create_experiment("a"), client.create_experiment("b")
    gone = client.create_experiment("gone")
    client.create_run(gone, start_time=T0 + 9000)
    client.delete_experiment(gone)  # its runs leave the listing
    made = []
    # Two runs start at the same millisecond (the run id breaks the tie), one is still running.
    for exp, start, name in [(a, T0, "r0"), (b, T0 + 1000, "r1"), (a, T0 + 1000, "r2")]:
        run = client.create_run(exp, start_time=start, run_name=name)
        client.log_metric(run.info.run_id, "loss", 0.5, step=0)
        client.log_metric(run.info.run_id, "loss", 0.25, step=1)
        client.log_metric(run.info.run_id, "acc", float("nan"))
        client.set_terminated(run.info.run_id, end_time=start + 1234)
        made.append(run.info.run_id)
    client.create_run(b, start_time=T0 + 5000, run_name="running")
    dropped = client.create_run(a, start_time=T0 + 7000)
    client.delete_run(dropped.info.run_id)
    for name in ("zeta", "alpha"):
        client.create_registered_model(name, tags={"team": "x"}, description=f"the {name}")
        for run_id in made:
            client.create_model_version(name, f"runs:/{run_id}/model", run_id)
    client.set_registered_model_alias("zeta", "champion", "2")
    client.set_registered_model_alias("zeta", "challenger", "3")
    client.delete_model_version("zeta", "3")
    client.create_registered_model("bare")
    # A prompt is a registered model tagged as one: MLflow's model search leaves it out.
    client.register_prompt("a-prompt", "Answer {{question}}")
    return module_workspace


@pytest.fixture
def workspace(store: Path) -> Path:
    return store


def _same(fast: Any, slow: Any) -> None:
    assert fast is not None
    assert json.dumps(fast) == json.dumps(slow)  # NaN-safe, and the order of keys counts


@pytest.mark.parametrize("limit", [1, 2, 50])
def test_list_runs_matches_the_service_function(limit: int) -> None:
    fast = fast_runs.list_runs(limit=limit)
    _same(fast, list_runs(limit=limit))
    assert fast is not None and len(fast) == min(limit, 4)


def test_list_runs_orders_as_mlflow_and_reads_latest_metrics() -> None:
    rows = fast_runs.list_runs()
    assert rows is not None
    names = [r["name"] for r in rows]
    assert names[0] == "running" and names[-1] == "r0" and set(names[1:3]) == {"r1", "r2"}
    r0 = rows[-1]
    assert r0["metrics"]["loss"] == 0.25 and r0["metrics"]["acc"] != r0["metrics"]["acc"]
    assert r0["duration_s"] == 1.234 and rows[0]["end_time"] is None


def test_list_models_matches_the_service_function() -> None:
    fast = fast_runs.list_models()
    _same(fast, list_models())
    assert fast is not None
    assert [m["name"] for m in fast] == ["alpha", "bare", "zeta"]
    zeta = fast[2]
    assert (zeta["latest"], zeta["versions"]) == (2, 2)  # version 3 was deleted
    assert zeta["aliases"] == {"champion": 2}


@pytest.mark.parametrize("args", [["runs", "list"], ["models", "list"], ["runs", "list", "--json"]])
def test_the_cli_prints_what_the_mlflow_path_prints(
    cli, store: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    fast = cli(*args)
    # A tracking URI naming the same file turns the fast path off: MLflow answers.
    monkeypatch.setenv("AIFAB_TRACKING_URI", f"sqlite:///{store / 'mlflow.db'}")
    assert fast_runs.list_runs() is None and fast_runs.list_models() is None
    slow = cli(*args)
    assert fast.exit_code == slow.exit_code == 0
    assert fast.stdout == slow.stdout


def test_listings_outside_the_fast_path_go_to_mlflow(monkeypatch: pytest.MonkeyPatch) -> None:
    assert fast_runs.list_runs(experiment="a") is None  # MLflow checks the name
    assert fast_runs.list_runs(limit=0) is None  # the service function's error
    monkeypatch.setenv("MLFLOW_WORKSPACE", "team-b")
    assert fast_runs.list_runs() is None and fast_runs.list_models() is None


@pytest.mark.parametrize("args", [["runs", "list"], ["models", "list"]])
def test_listing_in_a_fresh_process_imports_no_mlflow(store: Path, args: list[str]) -> None:
    probe = (
        "import sys\n"
        "from aifab.cli.main import main\n"
        f"sys.argv = ['aifab', *{args!r}, '--json']\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exc:\n"
        "    assert not exc.code, exc.code\n"
        "print('HEAVY', [m for m in ('mlflow', 'sqlalchemy') if m in sys.modules])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout[: done.stdout.index("HEAVY")])
    assert done.stdout.strip().endswith("HEAVY []")


def test_the_pinned_revision_is_the_one_installed_mlflow_makes(tmp_path: Path) -> None:
    """When MLflow's schema moves, this fails: re-check the queries, then move the pin."""
    with sqlite3.connect(tmp_path / "probe.db"):
        pass
    get_client(f"sqlite:///{tmp_path / 'probe.db'}")
    with sqlite3.connect(tmp_path / "probe.db") as conn:
        (revision,) = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    assert revision == fast_runs.MLFLOW_SCHEMA_REVISION


def test_a_workspace_without_a_store_goes_to_mlflow(
    cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AIFAB_HOME", str(tmp_path / "fresh"))
    assert fast_runs.list_runs() is None and fast_runs.list_models() is None
    out = cli("models", "list", "--json")
    assert out.exit_code == 0 and json.loads(out.stdout) == []
