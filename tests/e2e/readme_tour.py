"""Read the README's shell blocks as commands and run them, in order, the way a reader would.

The README is the input: every line of every ```` ```bash ```` block is a command (lines ending
in ``\\`` continue it); ``#`` comments are kept, since bash ignores them. The runner keeps one
shell environment across commands (an ``export`` in one block holds for the next), starts the
commands that end in ``&`` as background processes and stops them at the end, and maps the
README's ports (8000, 8001, ...) to free ports on 127.0.0.1. ``curl`` gets ``--fail-with-body``,
so an HTTP error fails its command as it would stop a reader.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

_FENCE = re.compile(r"^```(\w*)\s*$")
_HEADING = re.compile(r"^#{1,4} (.+)$")
_PORT = re.compile(r"(?<=[:=\s])80(\d\d)\b")


@dataclass(frozen=True)
class Command:
    """One command of the README: its text as written, where it is, and its section."""

    text: str
    line: int
    section: str

    @property
    def background(self) -> bool:
        """Whether the README starts it in the background (``cmd &``)."""
        return self.code.endswith("&")

    @property
    def code(self) -> str:
        """The command without a trailing ``# comment`` (quotes respected)."""
        return _strip_comment(self.text)


def _strip_comment(text: str) -> str:
    """``text`` up to the first ``#`` that starts a word outside quotes."""
    quote = ""
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1].isspace()):
            return text[:i].strip()
    return text.strip()


def parse_readme(path: Path) -> list[Command]:
    """Every command of every bash block of ``path``, in order."""
    commands: list[Command] = []
    section, lang, pending, start = "", None, "", 0
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        fence = _FENCE.match(raw)
        if fence:
            lang = None if lang is not None else fence.group(1)
            continue
        if lang is None:
            heading = _HEADING.match(raw)
            if heading:
                section = heading.group(1).strip()
            continue
        if lang not in ("bash", "sh", "shell"):
            continue
        line = raw.rstrip()
        if not pending:
            start = number
            if not line.strip() or line.lstrip().startswith("#"):
                continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        commands.append(Command((pending + line).strip(), start, section))
        pending = ""
    return commands


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Outcome:
    """What running one command did."""

    command: Command
    returncode: int
    output: str
    seconds: float
    skipped: str = ""


@dataclass
class Tour:
    """One shell session over a fresh workspace: runs commands and keeps their environment."""

    cwd: Path
    env: dict[str, str]
    # `aifab run examples/llm/pipeline.yaml` (pre-training plus fine-tuning on ~1,000-token RAG
    # prompts) takes 4-6 minutes on 2 shared cores.
    timeout_s: float = 600.0
    ports: dict[str, int] = field(default_factory=dict)
    background: list[tuple[subprocess.Popen[bytes], Path]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.env_file = self.cwd / ".tour-env"
        lines = [f"export {k}={shlex.quote(v)}" for k, v in self.env.items()]
        self.env_file.write_text("\n".join(lines) + "\n")

    def localize(self, code: str) -> str:
        """The command with the README's 80NN ports replaced by free local ones."""

        def swap(match: re.Match[str]) -> str:
            readme_port = match.group(0)
            if readme_port not in self.ports:
                self.ports[readme_port] = free_port()
            return str(self.ports[readme_port])

        code = _PORT.sub(swap, code)
        # curl exits 0 on an HTTP error; a reader would see the error body and stop.
        code = re.sub(r"^curl ", "curl --fail-with-body ", code)
        if re.match(r"^aifab serve\b", code) and "--port" not in code:
            code = code.replace("aifab serve", f"aifab serve --port {self.port('8000')}", 1)
        return code

    def port(self, readme_port: str) -> int:
        """The local port that stands for one of the README's."""
        return self.ports.setdefault(readme_port, free_port())

    def run(self, command: Command) -> Outcome:
        """Run one command (in the background if the README does) and say what it did."""
        code = self.localize(command.code)
        started = time.monotonic()
        if command.background:
            return self._start(command, code.rstrip("&").strip(), started)
        script = (
            f"set -o pipefail\nsource {shlex.quote(str(self.env_file))}\n{code}\n"
            f"rc=$?\nexport -p > {shlex.quote(str(self.env_file))}\nexit $rc\n"
        )
        try:
            proc = subprocess.run(
                ["bash", "-c", script],
                cwd=self.cwd,
                env=self._base_env(),
                capture_output=True,
                timeout=self.timeout_s,
                stdin=subprocess.DEVNULL,
            )
            output = (proc.stdout + proc.stderr).decode(errors="replace")
            rc = proc.returncode
        except subprocess.TimeoutExpired as exc:
            output = f"timed out after {self.timeout_s:.0f} s\n" + _text(exc.stdout)
            rc = 124
        return Outcome(command, rc, output, time.monotonic() - started)

    def _base_env(self) -> dict[str, str]:
        return {
            "PATH": self.env["PATH"],
            "HOME": os.environ.get("HOME", "/root"),
            "LANG": "C.UTF-8",
        }

    def _start(self, command: Command, code: str, started: float) -> Outcome:
        log = self.cwd / f".tour-bg-{len(self.background)}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                ["bash", "-c", f"source {shlex.quote(str(self.env_file))}\nexec {code}"],
                cwd=self.cwd,
                env=self._base_env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.background.append((proc, log))
        # A background server is ready once the ports its command names accept connections.
        ports = [p for p in self.ports.values() if re.search(rf"\b{p}\b", code)]
        rc = 0 if all(_wait_listening(p, proc, 120.0) for p in ports) else 1
        output = log.read_text(errors="replace")
        return Outcome(command, rc, output, time.monotonic() - started)

    def close(self) -> None:
        """Stop every background process the tour started (SIGTERM, then SIGKILL)."""
        for proc, _ in self.background:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc, _ in self.background:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _wait_listening(port: int, proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            time.sleep(0.3)
    return False


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data


def iter_sections(commands: list[Command]) -> Iterator[str]:
    """The sections that hold commands, in README order (for reports)."""
    seen: list[str] = []
    for c in commands:
        if c.section not in seen:
            seen.append(c.section)
            yield c.section
