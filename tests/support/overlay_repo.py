"""A small upstream git repository over the installed torch: its base commit holds the
installed torch's own ``torch/__init__.py`` and ``torch/functional.py`` (so nothing differs from
the wheel), its head changes ``functional.py`` (adds ``RELAY_OVERLAY_PROBE``), adds a module
``torch/_relay_new.py`` and changes a compiled file. An overlay of the head over the installed
torch lays exactly those two Python files over."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from backends.base import package_dir
from tests.support.small_upstream import UpstreamRepo

TORCH = package_dir("torch")
PROBE = "\nRELAY_OVERLAY_PROBE = 'laid over'\n"
NEW_MODULE = "VALUE = 7\n"


@dataclass(frozen=True)
class OverlayUpstream:
    repo: UpstreamRepo
    base: str
    head: str
    torch: Path  # the installed torch package (the overlay's base)
    probe: str = PROBE  # what the head appends to torch/functional.py
    new_module: str = NEW_MODULE  # torch/_relay_new.py at head


def overlay_upstream(root: Path) -> OverlayUpstream:
    """The repository under ``root`` with its base and head SHAs."""
    assert TORCH is not None, "torch is not installed"
    functional = (TORCH / "functional.py").read_text()
    repo = UpstreamRepo.create(
        root,
        {
            "torch/__init__.py": (TORCH / "__init__.py").read_text(),
            "torch/functional.py": functional,
            "aten/src/ATen/native/native_functions.yaml": "- func: add\n",
        },
    )
    base = repo.git("rev-parse", "HEAD").strip()
    head = repo.commit(
        {
            "torch/functional.py": functional + PROBE,
            "torch/_relay_new.py": NEW_MODULE,
            "aten/src/ATen/native/native_functions.yaml": "- func: add\n- func: mul\n",
        }
    )
    return OverlayUpstream(repo=repo, base=base, head=head, torch=TORCH)
