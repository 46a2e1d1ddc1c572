"""A head commit's torch/**.py laid over the installed torch's binaries (upstream.overlay), on a
small generated upstream git repository whose base holds some of the installed torch's own
files."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from backends.base import package_dir, torch_build
from upstream.overlay import MARKER, ensure_overlay, remove_overlays
from upstream.undertest import UpstreamUnderTest, resolve_environment

TORCH = package_dir("torch")
assert TORCH is not None
SHOW = (
    "import json, torch, torch.functional as f, torch._relay_new as n; "
    "print(json.dumps([torch.__file__, getattr(f, 'RELAY_OVERLAY_PROBE', None), n.VALUE, "
    "(torch.ones(2) * 2).tolist()]))"
)


@pytest.fixture
def upstream(overlay_upstream: Any) -> tuple[Any, str, str]:
    return overlay_upstream.repo, overlay_upstream.base, overlay_upstream.head


def test_changed_files_are_copied_and_the_rest_linked(
    upstream: tuple[Any, str, str], tmp_path: Path
) -> None:
    repo, _, head = upstream
    probe = "\nRELAY_OVERLAY_PROBE = 'laid over'\n"  # what the head appends
    envs = tmp_path / "envs"
    made = ensure_overlay(repo.path, head, base_torch=TORCH, root=envs, base_build=torch_build())
    assert (made.head_sha, made.laid_over, made.created) == (head, 2, True)
    torch_dir = made.directory / "torch"
    assert not (torch_dir / "functional.py").is_symlink()
    assert (torch_dir / "functional.py").read_text().endswith(probe)
    assert (torch_dir / "_relay_new.py").read_text() == "VALUE = 7\n"
    # unchanged: linked, a whole folder at once; the base's bytecode is not shared
    assert (torch_dir / "__init__.py").resolve() == (TORCH / "__init__.py").resolve()
    assert (torch_dir / "nn").is_symlink() and (torch_dir / "nn").resolve() == (
        TORCH / "nn"
    ).resolve()
    assert not (torch_dir / "__pycache__").exists()
    marker = json.loads((made.directory / MARKER).read_text())
    assert marker["files"] == ["_relay_new.py", "functional.py"]
    again = ensure_overlay(repo.path, head, base_torch=TORCH, root=envs, base_build=torch_build())
    assert (again.directory, again.laid_over, again.created) == (made.directory, 2, False)


def test_the_overlay_environment_imports_the_heads_python(
    upstream: tuple[Any, str, str], tmp_path: Path
) -> None:
    repo, _, head = upstream
    under_test = UpstreamUnderTest(kind="overlay", head_sha=head)
    env = resolve_environment(under_test, envs=tmp_path / "envs", checkout=repo.path)
    assert (env.torch_build, env.files_laid_over) == (torch_build(), 2)
    out = subprocess.run(
        [env.python, "-P", "-c", SHOW], env=env.env, capture_output=True, text=True, check=True
    )
    torch_file, probe, new, ones = json.loads(out.stdout.strip().splitlines()[-1])
    assert torch_file.startswith(env.extra["overlay"])
    assert (probe, new, ones) == ("laid over", 7, [2.0, 2.0])
    # the installed torch itself is untouched
    plain = subprocess.run(
        [
            env.python,
            "-P",
            "-c",
            "import torch.functional as f; print(hasattr(f, 'RELAY_OVERLAY_PROBE'))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert plain.stdout.strip() == "False"


def test_the_base_commit_lays_nothing_over(upstream: tuple[Any, str, str], tmp_path: Path) -> None:
    repo, base, _ = upstream
    made = ensure_overlay(repo.path, base, base_torch=TORCH, root=tmp_path, base_build="b")
    assert made.laid_over == 0
    assert (made.directory / "torch" / "functional.py").is_symlink()


def test_the_sweeper_removes_overlays_no_job_needs(
    upstream: tuple[Any, str, str], tmp_path: Path
) -> None:
    repo, base, head = upstream
    kept = ensure_overlay(repo.path, head, base_torch=TORCH, root=tmp_path, base_build="b")
    old = ensure_overlay(repo.path, base, base_torch=TORCH, root=tmp_path, base_build="b")
    assert remove_overlays(tmp_path, keep=[], older_than_seconds=3600) == []  # used just now
    assert remove_overlays(tmp_path, keep=[head], older_than_seconds=0) == [old.directory]
    assert kept.directory.is_dir() and not old.directory.exists()
    assert (TORCH / "functional.py").is_file()  # links removed, never what they point to


def test_an_unknown_head_is_a_one_line_error(
    upstream: tuple[Any, str, str], tmp_path: Path
) -> None:
    from upstream.overlay import OverlayError

    repo, _, _ = upstream
    with pytest.raises(OverlayError, match=f"^{'f' * 40}: not a commit in "):
        ensure_overlay(repo.path, "f" * 40, base_torch=TORCH, root=tmp_path, base_build="b")
