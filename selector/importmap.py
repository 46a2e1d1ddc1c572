"""The import map: which upstream modules the universe's test runs actually import.

Learned from our own runs: a sample of the universe (a few variants per template) runs under
pytest with the backend's plugins and this module as a plugin; at the end of the session every
loaded module whose file is inside the torch package is written out as ``torch/...`` paths. A
change to a module that the runs never import cannot change a test outcome, so the
``import-map`` signal accounts for it with no test (modules imported lazily by tests outside the
sample are the known gap; the map is keyed by torch build and backend version, and re-learned
when either changes).

Run as a plugin: ``pytest -p selector.importmap --import-map-out FILE ...``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

from selector.inventory import Variant

IMPORT_MAP_VERSION = 1
DEFAULT_IMPORT_MAP_DIR = Path("var/selector")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--import-map-out", default=None,
                     help="write the torch modules loaded during the session (selector)")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    out = session.config.getoption("--import-map-out")
    if out:
        Path(out).write_text(json.dumps(sorted(loaded_torch_modules())), encoding="utf-8")


def loaded_torch_modules() -> set[str]:
    import torch

    root = Path(torch.__file__).resolve().parent.parent
    found = set()
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if not path:
            continue
        try:
            rel = Path(path).resolve().relative_to(root).as_posix()
        except ValueError:
            continue
        if rel.startswith("torch/") or rel.startswith("torchgen/"):
            found.add(rel)
    return found


def sample(variants: Iterable[Variant], per_template: int) -> list[str]:
    by_template: dict[tuple[str, str], list[str]] = {}
    for v in variants:
        by_template.setdefault((v.file, v.base), []).append(v.test_id)
    out = []
    for key in sorted(by_template):
        ids = sorted(by_template[key])
        step = max(1, len(ids) // per_template)
        out += ids[::step][:per_template]
    return out


def learn_import_map(
    variants: Sequence[Variant],
    *,
    key: str,
    backend: str = "spyre",
    per_template: int = 3,
    cache_dir: Path = DEFAULT_IMPORT_MAP_DIR,
    root: Path | None = None,
    timeout: float = 1800,
) -> Path:
    """Run a sample, write and return the map file (reused when ``key`` already has one)."""
    from selector.inventory_sources import PROJECT_ROOT, get_backend

    path = cache_dir / f"importmap-{key}.json"
    if path.is_file():
        return path
    be = get_backend(backend)
    ids = sample(variants, per_template)
    with tempfile.TemporaryDirectory(prefix="relay-importmap-") as tmp:
        out = Path(tmp) / "modules.json"
        cmd = [sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "-p", "selector.importmap", "--import-map-out", str(out)]
        for plugin in be.plugins:
            cmd += ["-p", plugin]
        cmd += ids
        proc = subprocess.run(cmd, cwd=root or PROJECT_ROOT, env={**os.environ, **be.env},
                              capture_output=True, text=True, timeout=timeout, check=False)
        if not out.is_file():
            raise RuntimeError(f"import-map run failed:\n{(proc.stdout + proc.stderr)[-2000:]}")
        modules = json.loads(out.read_text(encoding="utf-8"))
    data: dict[str, Any] = {"version": IMPORT_MAP_VERSION, "key": key, "tests_run": len(ids),
                            "modules": modules}
    cache_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    return path


def load_import_map(path: str | Path | None) -> dict[str, Any] | None:
    if path is None or not Path(path).is_file():
        return None
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return data if data.get("version") == IMPORT_MAP_VERSION else None
