"""A throwaway PostgreSQL server from the machine's packages (``pg_config --bindir``).

Started in a temp dir on a free 127.0.0.1 port, as a non-root user (PostgreSQL refuses to run as
root: ``runuser -u postgres`` when the tests run as root), trusted local logins, stopped at the
end. :func:`find_bindir` says why it cannot run where no PostgreSQL exists.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from serve_proc import free_port


def find_bindir() -> tuple[Path | None, str]:
    """PostgreSQL's bin directory, or None and the reason it is missing."""
    pg_config = shutil.which("pg_config")
    if pg_config is None:
        return None, "no PostgreSQL here: pg_config is not on PATH (apt-get install postgresql)"
    bindir = Path(subprocess.check_output([pg_config, "--bindir"], text=True).strip())
    missing = [b for b in ("initdb", "pg_ctl", "postgres") if not (bindir / b).is_file()]
    if missing:
        return None, f"no PostgreSQL server here: {bindir} lacks {', '.join(missing)}"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return None, "running as root without runuser: cannot start PostgreSQL as another user"
    return bindir, ""


class PostgresServer:
    """One PostgreSQL cluster in a temp dir; :meth:`new_database` hands out fresh databases."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="aifab-pg-"))
        self.port = free_port()
        self.user = "postgres" if os.geteuid() == 0 else os.environ.get("USER", "postgres")
        os.chmod(self.root, 0o755)
        if os.geteuid() == 0:
            shutil.chown(self.root, self.user)
        self.data = self.root / "data"
        self._run("initdb", "-D", str(self.data), "-U", self.user, "-A", "trust", "-E", "UTF8")
        opts = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        opts += " -c max_connections=200"
        self._run(
            "pg_ctl", "-D", str(self.data), "-o", opts, "-l", str(self.root / "log"), "-w", "start"
        )
        self.url = f"postgresql+psycopg://{self.user}@127.0.0.1:{self.port}"

    def _run(self, tool: str, *args: str) -> None:
        cmd = [str(self.bindir / tool), *args]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)

    def new_database(self, prefix: str = "aifab") -> str:
        """Create an empty database; returns its SQLAlchemy URL."""
        import psycopg

        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        dsn = f"host=127.0.0.1 port={self.port} user={self.user} dbname=postgres"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"{self.url}/{name}"

    def stop(self) -> None:
        """Stop the server and delete its files."""
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        except subprocess.CalledProcessError:
            time.sleep(0.1)
        shutil.rmtree(self.root, ignore_errors=True)
