"""Layer 6, pipelines: run YAML files whose steps call the service functions of every layer.

``run_pipeline("pipeline.yaml")`` runs the steps in order, records each step's inputs and
outputs, and skips steps whose inputs have not changed; ``submit_pipeline`` runs one as a job
on another node; :data:`STEPS` maps step types to code.
"""

from __future__ import annotations

from aifab.pipeline.examples import example_pipeline, examples_dir
from aifab.pipeline.remote import inline_pipeline, submit_pipeline
from aifab.pipeline.runner import RunResult, StepResult, run_pipeline
from aifab.pipeline.spec import (
    PipelineSpec,
    PreparedStep,
    StepContext,
    StepOutputs,
    StepSpec,
    load_pipeline,
)
from aifab.pipeline.steps import STEPS

__all__ = [
    "STEPS",
    "PipelineSpec",
    "PreparedStep",
    "RunResult",
    "StepContext",
    "StepOutputs",
    "StepResult",
    "StepSpec",
    "load_pipeline",
    "run_pipeline",
    "inline_pipeline",
    "submit_pipeline",
    "example_pipeline",
    "examples_dir",
]
