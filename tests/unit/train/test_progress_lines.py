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
