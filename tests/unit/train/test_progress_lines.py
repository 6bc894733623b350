"""Training shows progress where a person looks: plain lines in the job log when not on a
terminal, so ``aifab job logs`` (and ``-f``, and the dashboard's job page) show steps, loss,
throughput and ETA while it runs (issue 36, item 1)."""

from __future__ import annotations

import json
import re
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

CONFIG = """dataset: lm_corpus
text_column: text
model: {preset: tiny}
vocab_size: 384
block_size: 32
batch_size: 4
max_steps: 3
eval_every: 3
system_metrics: false
threads: 1
progress_every_s: 0
"""


def test_train_job_log_has_a_progress_line_per_step(cli, tmp_path: Path) -> None:
    corpus = EXAMPLES / "llm" / "data" / "corpus.jsonl"
    assert cli("data", "ingest", "lm_corpus", corpus).exit_code == 0
    config = tmp_path / "lm.yaml"
    config.write_text(CONFIG)
    done = cli("train", "lm", "-c", config, "--wait", "--local-worker", "--json")
    assert done.exit_code == 0, done.stderr
    job_id = json.loads(done.stdout)["id"]
    logs = cli("job", "logs", job_id)
    assert logs.exit_code == 0, logs.stderr
    lines = [line for line in logs.stdout.splitlines() if line.startswith("train step ")]
    assert [line.split()[2] for line in lines] == ["1/3", "2/3", "3/3"], logs.stdout
    pattern = r"train step \d/3 \(\d+%\) loss \d+\.\d{4} [\d,]+ samples/s eta \d+:\d\d"
    assert all(re.fullmatch(pattern, line) for line in lines), lines
    assert all(len(line) <= 80 for line in lines)


def test_aifab_run_piped_shows_each_step_and_the_training_progress(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    corpus = EXAMPLES / "llm" / "data" / "corpus.jsonl"
    config = "\n".join(
        "        " + line for line in CONFIG.replace("lm_corpus", "corpus").splitlines()
    )
    path = tmp_path / "pipeline.yaml"
    path.write_text(
        f"name: tiny-lm\nsteps:\n"
        f"  - {{name: ingest, uses: ingest, with: {{source: {corpus}, output: corpus}}}}\n"
        f"  - name: train\n    uses: train\n    with:\n      recipe: lm\n      config:\n{config}\n"
    )
    entry = "import sys; from aifab.cli.main import main; sys.argv[0] = 'aifab'; main()"
    done = subprocess.run(
        [sys.executable, "-c", entry, "run", str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "80"},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    said = done.stderr.splitlines()
    assert said[0] == "step 1/2 ingest (ingest): running"
    assert said[1].startswith("step 1/2 ingest: succeeded in ")
    assert said[2] == "step 2/2 train (train): running"
    progress = [line for line in said if line.startswith("  train: train step ")]
    assert [line.split()[3] for line in progress] == ["1/3", "2/3", "3/3"], done.stderr
    assert said[-1].startswith("step 2/2 train: succeeded in ")
    assert all(len(line) <= 80 for line in said)
