"""Hosts that share no disk, on one machine (the benchmarks' multi-host runs).

A :class:`Host` is a project folder to run code from, an environment with its own
``RELAY_VAR_DIR`` and ``HOME``, and the processes started for it. A shard host is a ``git
clone`` of HEAD at a path of its own (:func:`clone_host`); where the machine allows it (``unshare
-m``, root), each of its processes runs in a mount namespace of its own in which the other hosts'
folders are empty (the interpreter's environment, which may live inside another host's folder,
is bound back). tests/workers/test_multi_host.py gets this module through the ``multi_hosts``
fixture (tests/workers/conftest.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

#: in its own mount namespace a host sees none of the other hosts' folders: tmpfs over each,
#: the interpreter's environment bound back
_HIDE = """
set -e
mount --make-rprivate /
if [ -n "$KEEP" ]; then mkdir -p "$STASH"; mount --bind "$KEEP" "$STASH"; fi
for d in $HIDE; do mount -t tmpfs tmpfs "$d"; done
if [ -n "$KEEP" ]; then mkdir -p "$KEEP"; mount --bind "$STASH" "$KEEP"; fi
exec "$@"
"""


def namespaces_allowed() -> bool:
    """Whether this machine lets us make a mount namespace (``unshare -m``)."""
    try:
        return subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0
    except OSError:
        return False


@dataclass
class Host:
    name: str
    root: Path  # the project folder this host runs its code from
    env: dict[str, str]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    hide: list[Path] = field(default_factory=list)  # other hosts' folders (own mount namespace)

    @property
    def var(self) -> Path:
        return Path(self.env["RELAY_VAR_DIR"])

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        """``python *args`` on this host (its folder, environment and namespace), logging to
        ``RELAY_VAR_DIR/<name>.log``."""
        log = open(self.var / f"{name}.log", "wb")  # noqa: SIM115 - the process's, closed with it
        command, env = [sys.executable, *args], self.env
        if self.hide:
            prefix = Path(sys.prefix)
            keep = prefix if any(prefix.is_relative_to(h) for h in self.hide) else None
            env = {
                **env,
                "HIDE": " ".join(str(h) for h in self.hide),
                "KEEP": str(keep or ""),
                "STASH": str(self.var.parent / "stash"),
            }
            command = ["unshare", "-m", "sh", "-c", _HIDE, "sh", *command]
        proc = subprocess.Popen(
            command,
            cwd=self.root,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.procs.append(proc)
        return proc

    def start_control(self, port: int) -> None:
        """The control side of a stack on this host: the database migrated, then the API on
        ``port``, the control and planner workers and the beat (the caller waits for them)."""
        subprocess.run(
            [sys.executable, "-m", "cli", "db", "upgrade"],
            cwd=self.root,
            env=self.env,
            check=True,
            capture_output=True,
            timeout=120,
        )
        self.start("api", "-m", "uvicorn", "relay.app:app", "--port", str(port))
        self.start("control", "-m", "cli", "worker", "--queues", "relay")
        self.start("planner", "-m", "cli", "worker", "--queues", "plan")
        schedule = str(self.var / "celerybeat-schedule")
        self.start(
            "beat", "-m", "celery", "-A", "workers.celery_app", "beat", "--schedule", schedule
        )

    def log(self, name: str) -> str:
        path = self.var / f"{name}.log"
        return path.read_text(errors="replace") if path.is_file() else ""

    def stop(self, proc: subprocess.Popen[bytes] | None = None) -> None:
        """Stop one process of this host (its whole group), or all of them."""
        for p in [proc] if proc is not None else list(self.procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            self.procs.remove(p)


def make_host(name: str, root: Path, tmp: Path, shared: dict[str, str]) -> Host:
    """A host named ``name`` running the code of ``root``, with ``tmp/name/var`` and
    ``tmp/name/home``; another folder than this process's project runs its own code."""
    (tmp / name / "home").mkdir(parents=True)
    (tmp / name / "var").mkdir()
    env = {**shared, "HOME": str(tmp / name / "home"), "RELAY_VAR_DIR": str(tmp / name / "var")}
    if root.resolve() != Path(__file__).resolve().parents[2]:
        env["PYTHONPATH"] = str(root)
    return Host(name, root, env)


def clone_host(name: str, repo: Path, tmp: Path, shared: dict[str, str]) -> Host:
    """A shard host: a clone of ``repo``'s HEAD at ``tmp/name/srv-<name>/crcr-relay``."""
    root = tmp / name / f"srv-{name.lower()}" / "crcr-relay"
    subprocess.run(["git", "clone", "--quiet", str(repo), str(root)], check=True, timeout=300)
    return make_host(name, root, tmp, shared)
