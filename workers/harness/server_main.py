"""``python -P workers/harness/server_main.py warm PRELOAD...`` or ``... module SPEC``: the warm
pool's servers started from a file, not with ``python -m``.

A forked test child runs on top of its server's frames. Under ``-m`` the bottom ones belong to
``<frozen runpy>``, a file no module has, and every ``inspect.stack()`` of upstream's
device-generic tests (several a test) then scans all of ``sys.modules`` to look for its module
(backends/pytest_main.py says the same of a fresh pytest). ``-P`` keeps this folder off
``sys.path``; the project comes from the environment's install or its ``.pth``, as under ``-m``.
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> None:
    kind, *rest = argv
    if kind == "warm":
        from workers.harness import warm_server

        warm_server.main(rest)
    elif kind == "module":
        from workers.harness import module_server

        module_server.main(json.loads(rest[0]))
    else:
        raise SystemExit(f"server_main: unknown server {kind!r} (warm or module)")


if __name__ == "__main__":
    main(sys.argv[1:])
