"""docs/team.md, run top to bottom on one machine: each set-up step's commands, as written.

The team's shared services are real and local: a throwaway PostgreSQL cluster started as a
non-root user (the tests' ``tests/team/pg.py``), an ``mlflow server`` on it, moto's standalone S3
server as the named stand-in for S3/MinIO (``tests/moto_s3.py``), and a Ray cluster of one node
started with ``ray start --head`` (its own ``--temp-dir``, so other Ray users on the machine are
not joined to it) reached through Ray Client (``RAY_ADDRESS=ray://...``). Every ``aifab`` command
runs as a child process with the environment the doc sets. Not runnable here: several machines,
a Kubernetes/Volcano cluster (the Volcano step is the doc's ``--dry-run``), a real bucket.

It prints one line per step (ran / FAILED / skipped, and why) and exits 1 if a step failed.

    python bench/team_docs.py                  # every step
    python bench/team_docs.py --skip ray mlflow  # leave out the heavy ones
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "team.md"
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "team")]
from pg import PostgresServer, find_bindir  # noqa: E402

from moto_s3 import MotoS3Server  # noqa: E402
from serve_proc import free_port  # noqa: E402

STEPS = ("postgres", "mlflow", "store", "workers", "ray", "volcano", "gateways")


class Failed(Exception):
    """A documented command did not do what the doc says."""


class Team:
    """The shared services and the environment every machine of the team is given."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.env: dict[str, str] = {
            k: v for k, v in os.environ.items() if not k.startswith(("AIFAB_", "RAY_"))
        }
        self.env.update(AIFAB_HOME=str(tmp / "head"), RAY_AUTH_MODE="disabled")
        self.cleanup: list[Callable[[], None]] = []
        self.pg: PostgresServer | None = None

    def aifab(self, *args: str, check: bool = True, timeout: float = 300) -> str:
        """Run ``aifab ARGS`` with the team's environment; its stdout."""
        done = subprocess.run(
            [sys.executable, "-m", "aifab", *args],
            env=self.env,
            cwd=self.tmp,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and done.returncode != 0:
            raise Failed(f"aifab {' '.join(args)}: exit {done.returncode}: {done.stderr[-600:]}")
        return done.stdout + (done.stderr if not check else "")

    def start(self, argv: list[str], log: str, env: dict[str, str] | None = None) -> Any:
        """Start a long-running process (stopped at the end)."""
        out = (self.tmp / log).open("wb")
        proc = subprocess.Popen(argv, env=env or self.env, cwd=self.tmp, stdout=out, stderr=out)

        def stop() -> None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

        self.cleanup.append(stop)
        return proc


def wait_http(url: str, proc: Any, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise Failed(f"{url} did not answer (process exit {proc.poll()})")
        time.sleep(0.5)


def wait_job(team: Team, job_id: str, timeout: float = 300) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        job = json.loads(team.aifab("job", "show", job_id, "--json"))
        if job["state"] in ("succeeded", "failed", "cancelled"):
            return dict(job)
        if time.monotonic() > deadline:
            raise Failed(f"job {job_id} still {job['state']}: {job['reason']}")
        time.sleep(1)


# --- the set-up steps, in the doc's order -----------------------------------------------------


def step_postgres(team: Team) -> str:
    """1. createdb aifab; AIFAB_DB_URL=postgresql+psycopg://...; aifab init."""
    bindir, why = find_bindir()
    if bindir is None:
        raise Skipped(why)
    team.pg = pg = PostgresServer(bindir)  # as the postgres user: the server refuses root
    team.cleanup.append(pg.stop)
    createdb = [str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(pg.port), "-U", pg.user]
    subprocess.run([*createdb, "aifab"], check=True, capture_output=True, timeout=60)
    team.env["AIFAB_DB_URL"] = f"{pg.url}/aifab"
    info = json.loads(team.aifab("init", "--json"))
    if not info["db_url"].startswith("postgresql+psycopg://"):
        raise Failed(f"aifab init used {info['db_url']}")
    return f"PostgreSQL on port {pg.port} (as {pg.user}); aifab init migrated it"


def step_mlflow(team: Team) -> str:
    """2. createdb mlflow; mlflow server --backend-store-uri ... ; AIFAB_TRACKING_URI."""
    if team.pg is None:
        raise Skipped("needs the postgres step")
    pg = team.pg
    createdb = [str(pg.bindir / "createdb"), "-h", "127.0.0.1", "-p", str(pg.port), "-U", pg.user]
    subprocess.run([*createdb, "mlflow"], check=True, capture_output=True, timeout=60)
    port = free_port()
    mlflow = shutil.which("mlflow", path=str(Path(sys.executable).parent)) or "mlflow"
    proc = team.start(
        [
            mlflow,
            "server",
            "--backend-store-uri",
            f"{pg.url}/mlflow",
            "--artifacts-destination",
            str(team.tmp / "mlflow-artifacts"),
            "--host",
            "127.0.0.1",  # the doc's 0.0.0.0 serves other machines; one machine needs loopback
            "--port",
            str(port),
        ],
        "mlflow.log",
    )
    wait_http(f"http://127.0.0.1:{port}/health", proc)
    team.env["AIFAB_TRACKING_URI"] = f"http://127.0.0.1:{port}"
    return f"mlflow server on PostgreSQL, port {port}"


def step_store(team: Team) -> str:
    """3. AIFAB_STORAGE_URI=s3://team-bucket/aifab (+ AWS_ENDPOINT_URL_S3 for MinIO)."""
    s3 = MotoS3Server()
    team.cleanup.append(s3.stop)
    uri = f"s3://{s3.new_bucket()}/aifab"
    team.env.update(s3.env, AIFAB_STORAGE_URI=uri)
    info = json.loads(team.aifab("init", "--json"))
    if info.get("storage") != uri or info["lake"] != f"{uri}/lake":
        raise Failed(f"aifab init printed lake {info['lake']!r}, not the store's")
    csv = team.tmp / "customers.csv"
    csv.write_text("id,age,plan\n" + "".join(f"{i},{20 + i % 50},basic\n" for i in range(200)))
    team.aifab("data", "ingest", "customers", str(csv))
    verified = team.aifab("data", "verify")
    return f"lake on {uri} (moto S3 stand-in); ingest + data verify: {verified.split()[:6]}"


def _job_file(team: Team, name: str, code: str) -> Path:
    path = team.tmp / f"{name}.yaml"
    spec = {"name": name, "run": {"command": [sys.executable, "-c", code]}}
    path.write_text(yaml.safe_dump(spec))
    return path


def step_workers(team: Team) -> str:
    """4. aifab worker: it runs a local job; a Ray job waits with the reason shown."""
    local = team.aifab("job", "submit", str(_job_file(team, "hello", "print('hello team')")))
    far_out = team.aifab(
        "job", "submit", str(_job_file(team, "far", "print(1)")), "--executor", "ray", check=False
    )
    far = far_out.split()[0]
    team.aifab("worker", "--exit-when-idle", "3", timeout=300)
    job = wait_job(team, local.strip())
    if job["state"] != "succeeded":
        raise Failed(f"local job {job['state']}: {job['reason']}")
    logs = team.aifab("job", "logs", job["id"])
    if logs != "hello team\n":
        raise Failed(f"aifab job logs printed {logs!r}")
    waiting = json.loads(team.aifab("job", "show", far, "--json"))
    if "aifab worker --executor ray" not in (waiting["reason"] or ""):
        raise Failed(f"the ray job waits without saying why: {waiting['reason']!r}")
    team.aifab("job", "cancel", far)
    return "local job ran and its log printed; the ray job said which worker it needs"


def step_ray(team: Team) -> str:
    """5. Ray: RAY_ADDRESS=ray://head:10001 and aifab worker --executor ray."""
    ray_bin = shutil.which("ray", path=str(Path(sys.executable).parent))
    if ray_bin is None:
        raise Skipped("ray is not installed (pip install 'aifab[ray]')")
    port, client = free_port(), free_port()
    temp = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))  # short: Ray's socket paths
    node_root = team.tmp / "ray-nodes"
    # The node gets the DB URL and store credentials where `ray start` runs, as the doc says.
    node_env = {**team.env, "AIFAB_RAY_NODE_HOME": str(node_root)}
    head = [ray_bin, "start", "--head", "--port", str(port), "--temp-dir", str(temp)]
    head += ["--ray-client-server-port", str(client), "--num-cpus", "2"]
    head += ["--include-dashboard", "false", "--disable-usage-stats"]
    subprocess.run(head, env=node_env, check=True, capture_output=True, timeout=300)

    def ray_stop() -> None:
        # Only this cluster's processes, by id: `ray stop` would stop every Ray on the machine.
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in _ray_processes(temp):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + 10
            while _ray_processes(temp) and time.monotonic() < deadline:
                time.sleep(0.2)
        shutil.rmtree(temp, ignore_errors=True)

    team.cleanup.append(ray_stop)
    team.env.update(RAY_ADDRESS=f"ray://127.0.0.1:{client}", AIFAB_RAY_NODE_HOME=str(node_root))
    code = "import os; print('on ray', os.environ['RAY_ADDRESS'] != '')"
    job_id = team.aifab(
        "job", "submit", str(_job_file(team, "on-ray", code)), "--executor", "ray"
    ).strip()
    team.aifab("worker", "--executor", "ray", "--exit-when-idle", "5", timeout=600)
    job = wait_job(team, job_id)
    if job["state"] != "succeeded":
        raise Failed(f"ray job {job['state']}: {job['reason']}")
    logs = team.aifab("job", "logs", job_id)
    if logs != "on ray True\n":
        raise Failed(f"aifab job logs (no -f) printed {logs!r}")
    if (node_root / job_id).exists():
        raise Failed(f"the node folder {node_root / job_id} was left behind")
    return f"ray start --head + Ray Client; the job ran, its log read from the store ({logs!r})"


def _ray_processes(temp: Path) -> list[int]:
    """Pids of processes whose command line names this cluster's temp dir."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(temp) in cmd and int(name) != os.getpid():
            out.append(int(name))
    return out


def step_volcano(team: Team) -> str:
    """5. Volcano: aifab job submit job.yaml --executor volcano --dry-run --image ..."""
    for block in re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.S):
        spec = yaml.safe_load(textwrap.dedent(block))
        if isinstance(spec, dict) and spec.get("executor") == "volcano":
            break
    else:
        raise Failed("docs/team.md has no Volcano job example")
    path = team.tmp / "volcano.yaml"
    path.write_text(yaml.safe_dump(spec))
    image = "registry.example.com/aifab:0.1.0"
    out = team.aifab(
        "job", "submit", str(path), "--executor", "volcano", "--dry-run", "--image", image
    )
    kinds = [d["kind"] for d in yaml.safe_load_all(out) if d]
    warnings = [line for line in out.splitlines() if line.startswith("# warning")]
    return f"manifests {kinds}; warnings: {warnings or 'none'}"


def step_gateways(team: Team) -> str:
    """6. aifab serve --no-worker behind a load balancer (two, on one DB)."""
    ports = [free_port(), free_port()]
    for port in ports:
        proc = team.start(
            [sys.executable, "-m", "aifab", "serve", "--no-worker", "--port", str(port)],
            f"serve-{port}.log",
        )
        wait_http(f"http://127.0.0.1:{port}/readyz", proc)
    return f"two aifab serve --no-worker on ports {ports} ready on the shared DB"


class Skipped(Exception):
    """The step cannot run on this machine (the reason says why)."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip", nargs="*", default=[], choices=STEPS, help="Steps to leave out.")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="aifab-team-docs-"))
    team = Team(tmp)
    steps = {name: globals()[f"step_{name}"] for name in STEPS}
    failed = False
    try:
        for name, step in steps.items():
            start = time.perf_counter()
            if name in args.skip:
                print(f"{name:9} skipped (--skip)", flush=True)
                continue
            try:
                detail = step(team)
                status = "ran"
            except Skipped as exc:
                detail, status = str(exc), "skipped"
            except (Failed, subprocess.SubprocessError, OSError) as exc:
                detail, status, failed = str(exc), "FAILED", True
            took = time.perf_counter() - start
            print(f"{name:9} {status:7} {took:6.1f} s  {detail}", flush=True)
    finally:
        for stop in reversed(team.cleanup):
            try:
                stop()
            except Exception as exc:  # noqa: BLE001 - stop the rest all the same
                print(f"cleanup: {exc}", file=sys.stderr)
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
