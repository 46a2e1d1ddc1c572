"""ReleasedWheels on small generated torch wheels served to pip from a find-links folder.

pip runs for real (``pip download --no-deps``) but with its configuration switched off and only
the test's folder as the index, so these tests need no network and no large wheel.
"""

from __future__ import annotations

import os
import re
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from upstream import (
    WHEEL_LAYOUT,
    FileStatus,
    ReleasedWheels,
    UnknownRevisionError,
    UpstreamError,
    UpstreamFileNotFoundError,
    UpstreamSource,
    VersionNotFoundError,
)
from upstream.changes import compute_change_facts


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory, release_trees: Any) -> Path:
    folder = tmp_path_factory.mktemp("index")
    release_trees.make_wheel(folder, "2.12.0", release_trees.BASE)
    release_trees.make_wheel(folder, "2.13.0", release_trees.BASE)
    release_trees.make_wheel(folder, "2.13.1", release_trees.BASE)
    release_trees.make_wheel(folder, "2.14.0", release_trees.HEAD)
    return folder


def isolated_pip_env(index: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update({"PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1",
                "PIP_FIND_LINKS": str(index), "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    return env


@pytest.fixture
def wheels(index: Path, tmp_path: Path) -> ReleasedWheels:
    return ReleasedWheels(tmp_path / "cache", pip_env=isolated_pip_env(index))


def test_is_an_upstream_source(wheels: ReleasedWheels) -> None:
    assert isinstance(wheels, UpstreamSource)
    assert wheels.layout == WHEEL_LAYOUT


def test_minor_version_means_the_newest_patch_release(wheels: ReleasedWheels) -> None:
    rev = wheels.resolve("2.13")
    assert rev.kind == "wheels"
    assert rev.resolved == "2.13.1"
    assert rev.requested == "2.13"
    assert "newest 2.13.x" in rev.detail and "torch-2.13.1-py3-none-any.whl" in rev.detail
    assert Path(rev.location).parent == wheels.wheel_dir
    assert [p.name for p in wheels.cached_wheels()] == ["torch-2.13.1-py3-none-any.whl"]


def test_exact_version_and_v_prefix(wheels: ReleasedWheels) -> None:
    assert wheels.resolve("2.13.0").resolved == "2.13.0"
    assert wheels.resolve("v2.14.0").resolved == "2.14.0"


def test_a_cached_exact_version_does_not_run_pip(index: Path, tmp_path: Path) -> None:
    online = ReleasedWheels(tmp_path, pip_env=isolated_pip_env(index))
    online.resolve("2.14.0")
    no_pip = ReleasedWheels(tmp_path, pip_command=[sys.executable, "-c", "raise SystemExit(3)"])
    rev = no_pip.resolve("2.14.0")
    assert rev.resolved == "2.14.0" and "from the cache" in rev.detail
    with pytest.raises(UpstreamError, match=re.escape("pip download torch==2.13.0 failed")):
        no_pip.resolve("2.13.0")


def test_offline_resolves_from_the_cache_only(index: Path, tmp_path: Path) -> None:
    ReleasedWheels(tmp_path, pip_env=isolated_pip_env(index)).resolve("2.13.0")
    offline = ReleasedWheels(tmp_path, offline=True)
    assert offline.resolve("2.13").resolved == "2.13.0"
    with pytest.raises(VersionNotFoundError, match=re.escape("no cached torch wheel matches '2.14'")) as err:
        offline.resolve("2.14")
    # the message names the flag that forbade the download, and how to allow it
    assert "--offline forbids asking the package index (run without --offline" in str(err.value)


def test_a_download_reports_its_progress(index: Path, tmp_path: Path) -> None:
    lines: list[str] = []
    wheels = ReleasedWheels(tmp_path, pip_env=isolated_pip_env(index), progress=lines.append)
    wheels.resolve("2.13")
    assert lines[0] == "downloading torch==2.13.* from the package index (pip download)"
    assert any(line.startswith("pip: ") for line in lines)
    assert re.fullmatch(r"saved: torch-2\.13\.1-py3-none-any\.whl \(0 MB, \d+ s\)", lines[-1])
    lines.clear()
    wheels.resolve("2.13")  # asked again: the index is asked, the file is not fetched again
    assert lines[-1].startswith("already in the cache: torch-2.13.1-py3-none-any.whl")


def test_a_wheel_with_a_build_tag_is_a_release(
    tmp_path: Path, release_trees: Any
) -> None:
    """PyPI's torch 2.10.0 is torch-2.10.0-3-cp311-...: the build tag (PEP 427) is no part
    of the version, and of two builds of one release the higher one is taken from the cache."""
    index = tmp_path / "index"
    release_trees.make_wheel(index, "2.10.0", release_trees.BASE, build="1")
    release_trees.make_wheel(index, "2.10.0", release_trees.BASE, build="3")
    online = ReleasedWheels(tmp_path / "cache", pip_env=isolated_pip_env(index))
    rev = online.resolve("2.10")
    assert rev.resolved == "2.10.0"
    assert Path(rev.location).name == "torch-2.10.0-3-py3-none-any.whl"
    assert online.list_files(rev)  # read as a source tree like any other
    (online.wheel_dir / "torch-2.10.0-1-py3-none-any.whl").write_bytes(
        (index / "torch-2.10.0-1-py3-none-any.whl").read_bytes()
    )
    offline = ReleasedWheels(tmp_path / "cache", offline=True)
    assert [p.name for p in offline.cached_wheels()] == [
        "torch-2.10.0-1-py3-none-any.whl",
        "torch-2.10.0-3-py3-none-any.whl",
    ]
    cached = offline.resolve("2.10.0")
    assert cached.resolved == "2.10.0" and "torch-2.10.0-3-py3-none-any.whl" in cached.detail


@pytest.mark.parametrize("revision", ["2.15", "2.13.7", "3.0"])
def test_a_version_the_index_does_not_have(wheels: ReleasedWheels, revision: str) -> None:
    with pytest.raises(VersionNotFoundError,
                       match=re.escape(f"the package index offers no torch release matching '{revision}'")):
        wheels.resolve(revision)


@pytest.mark.parametrize("revision", ["main", "release/2.14", "2", "2.13.0rc1", ""])
def test_a_revision_that_is_not_a_release(wheels: ReleasedWheels, revision: str) -> None:
    with pytest.raises(UnknownRevisionError, match="is not a torch release version"):
        wheels.resolve(revision)


def test_read_the_wheel_as_a_source_tree(wheels: ReleasedWheels, release_trees: Any) -> None:
    base = wheels.resolve("2.13")
    files = wheels.list_files(base)
    assert files == sorted(release_trees.wheel_path(p) for p in release_trees.BASE if p.startswith(("torch/", "aten/", "tools/")))
    assert not any(".dist-info/" in p for p in files)
    assert wheels.read_file(base, release_trees.CMI).decode() == release_trees.BASE[release_trees.CMI]
    assert wheels.read_file(base, WHEEL_LAYOUT.native_functions).startswith(b"- func: add.Tensor")
    with pytest.raises(UpstreamFileNotFoundError, match=re.escape("torch/new_module.py: not in torch 2.13.1")):
        wheels.read_file(base, "torch/new_module.py")
    with pytest.raises(UpstreamFileNotFoundError):
        wheels.read_file(base, "torch-2.13.1.dist-info/METADATA")


def test_changed_files_from_the_zip_directory(wheels: ReleasedWheels, release_trees: Any) -> None:
    changes = wheels.changed_files(wheels.resolve("2.13"), wheels.resolve("2.14"))
    expected = {release_trees.wheel_path(p): s for p, s in release_trees.EXPECTED_FILES.items() if not p.startswith(("c10/", "test/"))}
    assert {c.path: c.status.value for c in changes} == expected
    assert all(c.status in FileStatus for c in changes)


def test_change_facts_from_wheels_match_the_checkout_layout(wheels: ReleasedWheels) -> None:
    facts = compute_change_facts(wheels, wheels.resolve("2.13"), wheels.resolve("2.14"))
    assert facts.source_kind == "wheels"
    assert {e.name for e in facts.native_functions} == {"mul.Tensor", "gelu", "silu"}
    assert [e.name for e in facts.derivatives] == ["relu"]
    assert facts.changed_opinfos() == {"add", "relu", "gelu", "silu", "linalg.norm"}
    assert facts.changed_moduleinfos() == {"torch.nn.ReLU"}
    assert facts.changed_symbols()["torch/nn/functional.py"] == {"relu", "silu", "old_fn",
                                                                 "Thing.method"}


def test_a_damaged_cached_wheel_is_removed(index: Path, tmp_path: Path) -> None:
    wheels = ReleasedWheels(tmp_path, pip_env=isolated_pip_env(index))
    wheels.wheel_dir.mkdir(parents=True)
    bad = wheels.wheel_dir / "torch-2.13.0-py3-none-any.whl"
    bad.write_bytes(b"not a zip")
    with pytest.raises(UpstreamError, match="damaged wheel removed from the cache"):
        wheels.resolve("2.13.0")
    assert not bad.exists()
    assert zipfile.is_zipfile(wheels.resolve("2.13.0").location)
