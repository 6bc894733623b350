"""``aifab runs`` and ``aifab models`` through the real CLI entry point."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from aifab.cli import main as cli_main
from aifab.cli import models as models_cli
from aifab.cli import runs as runs_cli
from aifab.track import register_model, start_run

Cli = Callable[..., Any]


def _set_env(mp: pytest.MonkeyPatch, home: Path) -> None:
    mp.setenv("AIFAB_HOME", str(home))
    mp.setenv("AIFAB_ACTOR", "user:test")
    for name in ("AIFAB_DB_URL", "AIFAB_TRACKING_URI", "AIFAB_DEBUG"):
        mp.delenv(name, raising=False)


@pytest.fixture(scope="module", autouse=True)
def wired() -> None:
    """Add the groups to the app unless cli/main.py already does."""
    names = {g.name for g in cli_main.app.registered_groups}
    if "runs" not in names:
        runs_cli.register(cli_main.app)
    if "models" not in names:
        models_cli.register(cli_main.app)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Shared with the track tests in the session: MLflow's schema takes seconds to make.
    return tmp_path_factory.getbasetemp() / "track-ws"


@pytest.fixture(autouse=True)
def workspace(home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Overrides the per-test workspace with the shared one."""
    _set_env(monkeypatch, home)
    return home


@pytest.fixture(scope="module")
def runs(home: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """Two runs of experiment ``cli-exp`` (lr differs) and model ``cli-m`` with two versions."""
    model = tmp_path_factory.mktemp("cli-model")
    (model / "weights.bin").write_bytes(b"w")
    ids = []
    with pytest.MonkeyPatch.context() as mp:
        _set_env(mp, home)
        for i, lr in enumerate((0.1, 0.01)):
            params = {"optimizer": {"lr": lr}, "epochs": 2}
            with start_run("cli-exp", run_name=f"r{i}", params=params, system_metrics=False) as run:
                run.log_metrics({"loss": 1.0 - i / 2}, step=0)
                run.log_artifacts(model, "model")
            register_model(run.id, "model", "cli-m")
            ids.append(run.id)
    yield ids


def test_runs_list_show_compare(cli: Cli, runs: list[str]) -> None:
    r = cli("runs", "list", "--experiment", "cli-exp", "--json")
    assert r.exit_code == 0, r.stderr
    listed = json.loads(r.stdout)
    assert [x["id"] for x in listed] == runs[::-1]
    assert listed[0]["metrics"] == {"loss": 0.5}
    r = cli("runs", "list", "-e", "cli-exp", "--limit", "1")
    assert r.exit_code == 0 and "r1" in r.stdout and "loss=0.5" in r.stdout
    r = cli("runs", "show", runs[0], "--json")
    shown = json.loads(r.stdout)
    assert shown["params"] == {"optimizer.lr": "0.1", "epochs": "2"}
    assert shown["artifacts"] == [{"path": "model/weights.bin", "size": 1}]
    r = cli("runs", "show", runs[0], "--history")
    assert r.exit_code == 0 and "optimizer.lr" in r.stdout and "history: loss" in r.stdout
    r = cli("runs", "compare", *runs, "--json")
    compared = json.loads(r.stdout)
    assert compared["params"] == {"optimizer.lr": ["0.1", "0.01"]} and compared["same_params"] == 1
    assert compared["metrics"] == {"loss": [1.0, 0.5]}
    r = cli("runs", "compare", *runs)
    assert r.exit_code == 0 and "optimizer.lr" in r.stdout


def test_models_list_show_versions_promote(cli: Cli, runs: list[str]) -> None:
    r = cli("models", "versions", "cli-m", "--json")
    assert [v["version"] for v in json.loads(r.stdout)] == [2, 1]
    r = cli("models", "promote", "cli-m", "1", "--alias", "champion")
    assert r.exit_code == 0 and r.stdout.strip() == "cli-m@champion -> version 1"
    r = cli("models", "promote", "cli-m", "2")
    assert r.stdout.strip() == "cli-m@champion -> version 2 (was version 1)"
    r = cli("models", "show", "cli-m@champion", "--json")
    assert json.loads(r.stdout)["run_id"] == runs[1]
    r = cli("models", "show", "cli-m@1")
    assert r.exit_code == 0 and runs[0] in r.stdout
    r = cli("models", "list", "--json")
    row = next(m for m in json.loads(r.stdout) if m["name"] == "cli-m")
    assert row["aliases"] == {"champion": 2} and row["latest"] == 2
    assert "cli-m" in cli("models", "list").stdout


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("runs", "show", "nope"), 1, "run 'nope' not found"),
        (("runs", "list", "-e", "no-exp"), 1, "experiment 'no-exp' not found"),
        (("runs", "compare", "abc"), 2, "at least two different run ids"),
        (("models", "show", "cli-m@gold"), 1, "model 'cli-m' has no alias 'gold'"),
        (("models", "show", "ghost"), 1, "model 'ghost' not found"),
        (("models", "versions", "ghost", "--json"), 1, "model 'ghost' not found"),
        (("models", "promote", "cli-m", "7"), 1, "model 'cli-m' has no version 7"),
        (("models", "promote", "cli-m", "1", "--alias", "v1"), 2, "alias 'v1'"),
    ],
)
def test_bad_refs_print_one_line(
    cli: Cli, runs: list[str], args: tuple[str, ...], code: int, message: str
) -> None:
    r = cli(*args)
    assert r.exit_code == code
    assert r.stderr.startswith("error: ") and message in r.stderr
    assert r.stderr.count("\n") == 1 and r.stdout == ""
