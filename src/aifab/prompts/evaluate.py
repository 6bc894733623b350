"""Prompt evaluation: a prompt version over a dataset version through a chat model, scored.

Answers are scored (exact, contains, regex, embedding similarity); the means are logged as
an MLflow run.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from aifab.core.audit import audited
from aifab.core.errors import InvalidInputError
from aifab.prompts import template as tpl
from aifab.prompts.chat import chat_model
from aifab.prompts.registry import get_prompt

__all__ = ["MAX_EVAL_ROWS", "SCORERS", "eval_prompt", "list_evals", "score_rows"]

MAX_EVAL_ROWS = 10_000
EMBEDDING_MODEL = "builtin:all-minilm-l6-v2"


def _exact(output: str, expected: str) -> float:
    return float(output.strip() == expected.strip())


def _contains(output: str, expected: str) -> float:
    return float(expected.strip().lower() in output.lower())


def _regex(output: str, expected: str) -> float:
    try:
        return float(re.search(expected, output) is not None)
    except re.error as exc:
        raise InvalidInputError(f"expected {expected!r}: not a regular expression: {exc}") from None


#: Scorers over (output, expected) -> [0, 1]; ``embedding`` is computed in batch separately.
SCORERS: dict[str, Callable[[str, str], float] | None] = {
    "exact": _exact,
    "contains": _contains,
    "regex": _regex,
    "embedding": None,
}


def _embedding_scores(outputs: Sequence[str], expected: Sequence[str]) -> list[float]:
    import numpy as np

    from aifab.inference.loading import load_served_model

    handler = load_served_model(EMBEDDING_MODEL).handler
    a = np.asarray(handler.predict([o or " " for o in outputs]), dtype="float32")
    b = np.asarray(handler.predict([e or " " for e in expected]), dtype="float32")
    return [float(x) for x in (a * b).sum(axis=1)]


def score_rows(
    outputs: Sequence[str], expected: Sequence[str], scorers: Sequence[str]
) -> dict[str, list[float]]:
    """Per-row scores of each scorer (pure apart from the embedding model)."""
    unknown = [s for s in scorers if s not in SCORERS]
    if unknown:
        raise InvalidInputError(f"scorer {unknown[0]!r}: unknown (known: {', '.join(SCORERS)})")
    out: dict[str, list[float]] = {}
    for name in scorers:
        fn = SCORERS[name]
        if fn is None:
            out[name] = _embedding_scores(outputs, expected)
        else:
            out[name] = [fn(o, e) for o, e in zip(outputs, expected, strict=True)]
    return out


def _rows(dataset: str, variables: list[str], expected_column: str) -> tuple[Any, list[dict]]:
    from aifab.data import head, resolve

    version = resolve(dataset)
    missing = [c for c in [*variables, expected_column] if c not in version.columns]
    if missing:
        raise InvalidInputError(
            f"dataset {version.ref}: no column(s) {', '.join(missing)} "
            f"(columns: {', '.join(version.columns)})"
        )
    if version.num_rows > MAX_EVAL_ROWS:
        raise InvalidInputError(f"dataset {version.ref}: over {MAX_EVAL_ROWS} rows to evaluate")
    if version.num_rows == 0:
        raise InvalidInputError(f"dataset {version.ref}: no rows to evaluate")
    return version, head(version.ref, version.num_rows).to_pylist()


def eval_prompt(
    ref: str,
    dataset: str,
    chat: str,
    *,
    expected_column: str = "expected",
    scorers: Sequence[str] = ("exact", "contains"),
    max_tokens: int = 64,
    timeout_s: float = 60.0,
    experiment: str = "prompt-eval",
) -> dict[str, Any]:
    """Run prompt ``ref`` over each row of ``dataset`` through ``chat`` and score the answers.

    The dataset's columns named like the prompt's variables fill it; ``expected_column`` holds
    the expected answer. Mean scores are logged as ``score/<scorer>`` metrics of an MLflow run
    in ``experiment`` with the dataset version as its input.

    Returns:
        ``{"prompt", "dataset", "chat", "rows", "scores": {scorer: mean}, "run_id", "examples"}``.

    Raises:
        InvalidInputError: unknown scorer, missing columns (named), too many or no rows.
        UpstreamError / UpstreamTimeout: the chat model failed.
    """
    from aifab.track import start_run

    unknown = [s for s in scorers if s not in SCORERS]
    if unknown or not scorers:
        raise InvalidInputError(f"scorers: give some of {', '.join(SCORERS)}")
    prompt = get_prompt(ref)
    version, rows = _rows(dataset, prompt["variables"], expected_column)
    model = chat_model(chat, timeout_s=timeout_s)
    started = time.perf_counter()
    outputs: list[str] = []
    for row in rows:
        text = tpl.render(
            prompt["template"], prompt["variables"], {v: row[v] for v in prompt["variables"]}
        )
        answer = model.complete([{"role": "user", "content": text}], max_tokens=max_tokens)
        outputs.append(answer.text)
    expected = ["" if row[expected_column] is None else str(row[expected_column]) for row in rows]
    per_row = score_rows(outputs, expected, scorers)
    means = {name: sum(v) / len(v) for name, v in per_row.items()}
    params = {
        "prompt": prompt["ref"],
        "dataset": version.ref,
        "chat": model.name,
        "max_tokens": max_tokens,
        "scorers": ",".join(scorers),
    }
    ds = {
        "name": version.dataset,
        "ref": version.ref,
        "digest": version.content_hash,
        "source": version.source,
        "num_rows": version.num_rows,
        "schema": version.schema,
        "context": "evaluation",
    }
    with start_run(
        experiment,
        run_name=f"{prompt['ref']} on {version.ref}",
        params=params,
        datasets=[ds],
        system_metrics=False,
    ) as run:
        run.log_metrics({f"score/{k}": v for k, v in means.items()}, step=0)
        run.log_metrics({"latency_s": time.perf_counter() - started}, step=0)
        examples = [
            {"output": o, "expected": e, **{k: per_row[k][i] for k in per_row}}
            for i, (o, e) in enumerate(zip(outputs, expected, strict=True))
        ]
        run.log_dict(examples, "examples.json")
        run_id = run.id
    audited("prompt.eval", f"prompt:{prompt['ref']}", {**params, "run_id": run_id})
    return {
        "prompt": prompt["ref"],
        "dataset": version.ref,
        "chat": model.name,
        "rows": len(rows),
        "scores": means,
        "run_id": run_id,
        "examples": examples[:5],
    }


def list_evals(
    name: str, *, experiment: str = "prompt-eval", limit: int = 20
) -> list[dict[str, Any]]:
    """Evaluations of prompt ``name`` (any version) by :func:`eval_prompt`, newest first.

    Returns:
        ``[{"run_id", "prompt", "dataset", "chat", "scorers", "scores": {scorer: mean},
        "latency_s", "started_at"}]``; empty when nothing was evaluated yet.

    Raises:
        NotFoundError: unknown prompt.
    """
    from aifab.track import get_client

    prompt = get_prompt(name)  # checks the name (it is quoted into the filter below)
    client = get_client()
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    runs = client.search_runs(
        [exp.experiment_id],
        filter_string=f"params.prompt LIKE '{prompt['name']}@%'",
        max_results=limit,
        order_by=["attributes.start_time DESC"],
    )
    out = []
    for run in runs:
        params, metrics = run.data.params, run.data.metrics
        if str(params.get("prompt", "")).rpartition("@")[0] != prompt["name"]:
            continue  # LIKE's '_' matched another character
        out.append(
            {
                "run_id": run.info.run_id,
                "prompt": params.get("prompt"),
                "dataset": params.get("dataset"),
                "chat": params.get("chat"),
                "scorers": params.get("scorers", ""),
                "scores": {
                    k.removeprefix("score/"): v
                    for k, v in metrics.items()
                    if k.startswith("score/")
                },
                "latency_s": metrics.get("latency_s"),
                "started_at": run.info.start_time / 1000.0 if run.info.start_time else None,
            }
        )
    return out
