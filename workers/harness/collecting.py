"""Collection paid once per warm pool and test module: a launcher that runs each shard child in a
fork of a module server (:mod:`workers.harness.module_server`) that collected the child's test
module once, and the warm pool's ordinary fork otherwise (a module that fails to collect, or a
child that is not the harness's).

Module servers are kept per (module, pytest arguments), the ``keep`` most recently used ones
(each holds its module's collected tests in memory); shards keep a module's tests together, so a
worker mostly moves from one module to the next.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from workers.harness.launchers import SERVER_MAIN, Child, WarmPool

logger = logging.getLogger("workers.harness")

_PLUGIN = ["-p", "workers.harness.report_plugin"]
_OPTIONS = {
    "--relay-events": "events",
    "--relay-artifacts": "artifacts",
    "--relay-device-time": "device_time",
}


@dataclass
class _Parsed:
    pytest_args: list[str]
    module: str
    request: dict[str, object]


def parse_child_args(args: list[str]) -> _Parsed | None:
    """The runner's child arguments (``*pytest_args, -p report_plugin, --relay-* ...,
    @ids_file``) as a module server request; None for anything else."""
    at = next(
        (i for i in range(len(args) - 1) if args[i : i + 2] == _PLUGIN),
        None,
    )
    files = [a[1:] for a in args if a.startswith("@")]
    if at is None or len(files) != 1:
        return None
    request: dict[str, object] = {"ids": files[0]}
    rest = args[at + 2 :]
    for i, arg in enumerate(rest[:-1]):
        if arg in _OPTIONS:
            request[_OPTIONS[arg]] = rest[i + 1]
    try:
        with open(files[0]) as f:
            first = f.readline().strip()
    except OSError:
        return None
    if "events" not in request or not first:
        return None
    return _Parsed(args[:at], first.split("::", 1)[0], request)


@dataclass
class ModuleServer(WarmPool):
    """A :class:`WarmPool` whose server collected one module: requests name the tests."""

    module: str = ""
    pytest_args: list[str] = field(default_factory=list)

    def _command(self) -> list[str]:
        spec = {"preload": self.preload, "args": self.pytest_args, "module": self.module}
        return [self.python, "-P", str(SERVER_MAIN), "module", json.dumps(spec)]

    def _request(self, args: list[str], log: Path) -> dict[str, object]:
        parsed = parse_child_args(args)
        assert parsed is not None and parsed.module == self.module
        return {**parsed.request, "log": str(log)}


@dataclass
class CollectingLauncher:
    base: WarmPool
    keep: int = 2
    _servers: OrderedDict[tuple[str, tuple[str, ...]], ModuleServer] = field(
        default_factory=OrderedDict
    )
    _failed: set[tuple[str, tuple[str, ...]]] = field(default_factory=set)

    def start(self, args: list[str], *, log: Path) -> Child:
        parsed = parse_child_args(args)
        if parsed is None:
            return self.base.start(args, log=log)
        key = (parsed.module, tuple(parsed.pytest_args))
        if key in self._failed:
            return self.base.start(args, log=log)
        server = self._servers.pop(key, None)
        if server is None:
            server = ModuleServer(
                cwd=self.base.cwd,
                env=self.base.env,
                preload=list(self.base.preload),
                python=self.base.python,
                module=parsed.module,
                pytest_args=list(parsed.pytest_args),
            )
        self._servers[key] = server  # most recently used last
        while len(self._servers) > max(1, self.keep):
            _, old = self._servers.popitem(last=False)
            old.close()
        try:
            return server.start(args, log=log)
        except RuntimeError as exc:  # the module does not collect: the ordinary warm fork
            logger.warning("module server for %s failed: %s; forking per child", parsed.module, exc)
            self._servers.pop(key, None)
            server.close()
            self._failed.add(key)
            return self.base.start(args, log=log)

    def close(self) -> None:
        for server in self._servers.values():
            server.close()
        self._servers.clear()
        self.base.close()
