"""Ctrl-C on ``aifab run`` cancels the job its train step started, and says so (issue 36, item 2).

Before, the job was re-queued as preempted and came back as attempt 2 in the next worker.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from aifab.jobs.service import get_job, list_jobs

ENTRY = "import sys; from aifab.cli.main import main; sys.argv[0] = 'aifab'; main()"

PIPELINE = f"""name: sleepy
steps:
  - name: train
    uses: train
    with:
      recipe: custom
      config:
        command: [{sys.executable!r}, -c, "import time; time.sleep(600)"]
        system_metrics: false
"""


def _running_job(proc: subprocess.Popen[str], timeout_s: float = 120.0) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        running = [j for j in list_jobs() if j["state"] == "running"]
        if running:
            return str(running[0]["id"])
        assert proc.poll() is None, f"aifab run exited early: {proc.communicate()}"
        assert time.monotonic() < deadline, "the train step's job never started running"
        time.sleep(0.2)


def test_ctrl_c_cancels_the_running_job_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / "pipeline.yaml"
    path.write_text(PIPELINE)
    # A session of its own, so SIGINT reaches the whole process group as a terminal's Ctrl-C.
    proc = subprocess.Popen(
        [sys.executable, "-c", ENTRY, "run", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "COLUMNS": "80"},
    )
    try:
        job_id = _running_job(proc)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err
    job = get_job(job_id)
    assert job["state"] == "cancelled", job
    assert f"interrupted: cancelled job {job_id} (sleepy-train)" in err
