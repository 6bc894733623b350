"""The ``custom`` recipe: run any command inside a tracked run.

The command gets ``MLFLOW_TRACKING_URI`` and ``MLFLOW_RUN_ID`` in its environment, so a user's
script that calls plain MLflow logs into the same run; the run ends FINISHED or FAILED by the
command's exit status, and a non-zero status is the replica's exit status too.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from aifab.core.config import StrictConfig, as_config
from aifab.core.errors import InvalidInputError, NotFoundError


class Config(StrictConfig):
    """A command to run in a tracked run."""

    command: list[str] = Field(..., min_length=1, description="Command line (list or string).")
    experiment: str = Field("custom", description="MLflow experiment.")
    run_name: str | None = None
    params: dict[str, Any] = Field(default_factory=dict, description="Params logged first.")
    datasets: list[str] = Field(
        default_factory=list, description="Dataset refs the command reads (logged as inputs)."
    )
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment.")
    cwd: str | None = Field(None, description="Working directory of the command.")
    system_metrics: bool = Field(True, description="Log CPU/memory/GPU use.")

    @field_validator("command", mode="before")
    @classmethod
    def _split(cls, v: Any) -> Any:
        return shlex.split(v) if isinstance(v, str) else v

    def check_inputs(self) -> None:
        """The program and the datasets exist (checked before a job starts)."""
        program = self.command[0]
        base = Path(self.cwd) if self.cwd else Path.cwd()
        if shutil.which(program) is None and not (base / program).is_file():
            raise InvalidInputError(f"command: program {program!r} not found")
        if self.cwd and not Path(self.cwd).is_dir():
            raise InvalidInputError(f"cwd: {self.cwd} is not a directory")
        _versions(self.datasets)


def _versions(refs: list[str]) -> list[Any]:
    from aifab.data.catalog import resolve

    out = []
    for i, ref in enumerate(refs):
        try:
            out.append(resolve(ref))
        except NotFoundError as exc:
            raise InvalidInputError(f"datasets[{i}]: {exc.message}") from None
    return out


def main(config: Mapping[str, Any] | Config | str | Path) -> dict[str, Any]:
    """Run the command in a new run; return ``run_id`` and ``exit_code``.

    Only rank 0 of a multi-replica job opens the run; other ranks just run the command.

    Raises:
        SystemExit: with the command's status when it is not 0 (after the run is ended).
    """
    cfg = as_config(Config, config, source="custom config")
    from aifab.train.datasets import dataset_input

    env = {**os.environ, **cfg.env}
    if int(os.environ.get("RANK", "0")) != 0:
        code = subprocess.run(cfg.command, env=env, cwd=cfg.cwd, check=False).returncode
        if code:
            raise SystemExit(code if code > 0 else 128 - code)
        return {"run_id": None, "exit_code": 0}
    from aifab.track.tracking import run_env, start_run

    inputs = [dataset_input(v, "input") for v in _versions(cfg.datasets)]
    run = start_run(
        cfg.experiment,
        run_name=cfg.run_name,
        params={"recipe": "custom", "command": shlex.join(cfg.command), **cfg.params},
        tags={"aifab.recipe": "custom"},
        datasets=inputs,
        system_metrics=cfg.system_metrics,
    )
    code = 1
    try:
        try:
            code = subprocess.run(
                cfg.command, env={**env, **run_env(run)}, cwd=cfg.cwd, check=False
            ).returncode
        except OSError as exc:
            raise InvalidInputError(f"command: cannot run {cfg.command[0]!r} ({exc})") from None
        run.set_tags({"aifab.exit_code": code})
    finally:
        run.end("FINISHED" if code == 0 else "FAILED")
    if code:
        # A signal death (negative code) becomes the shell's 128+N convention.
        raise SystemExit(code if code > 0 else 128 - code)
    return {"run_id": run.id, "exit_code": 0}
