"""The C++ core's build cache: one directory per torch build (version and git revision, Python
ABI, sources and flags), built once under an OS lock that dies with its process, so a build killed
half way blocks nobody and racing processes build once."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import sysconfig
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from spyre_stack import _build
from spyre_stack.config import SpyreConfig

#: a process that loads the device and computes on it, logging what the build cache does
USE_THE_DEVICE = (
    "import logging, torch, spyre_stack\n"
    "logging.basicConfig(level=logging.INFO)\n"
    "spyre_stack.register()\n"
    "print((torch.ones(2, device='spyre') * 3).cpu().tolist())\n"
)


def test_each_torch_build_gets_its_own_directory(tmp_path: Path) -> None:
    config = SpyreConfig(extensions_dir=tmp_path)
    here = _build.current_key()
    assert (here.torch_version, here.torch_git) == (torch.__version__, torch.version.git_version)
    assert here.python_abi == sysconfig.get_config_var("SOABI")
    assert here.sources == _build.sources_digest(_build._cflags())
    others = [
        replace(here, torch_version="2.14.1+cpu", torch_git="5" * 40),  # another release
        replace(here, torch_git="f" * 40),  # the same version, another build
        replace(here, python_abi="cpython-312-x86_64-linux-gnu"),  # another Python
        replace(here, sources="0" * 64),  # other sources or flags
    ]
    dirs = [_build.build_dir(config, k) for k in [here, *others]]
    assert len(set(dirs)) == len(dirs)
    assert {d.parent for d in dirs} == {tmp_path}
    assert _build.build_dir(config) == dirs[0]  # the default key is this process's torch
    assert dirs[1].name.startswith("spyre_stack_core-2.14.1+cpu-git555555555555-")
    assert _build.sources_digest(["-O1"]) != _build.sources_digest(["-O1", "-std=c++17"])


def test_the_build_lock_is_released_when_its_holder_is_killed(tmp_path: Path) -> None:
    directory = tmp_path / "spyre_stack_core-key"
    with subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom pathlib import Path\nfrom spyre_stack._build import build_lock\n"
            f"with build_lock(Path({str(directory)!r})):\n"
            "    print('held', flush=True)\n    time.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
            with open(directory.with_name(directory.name + ".lock"), "a+b") as handle:
                with pytest.raises(BlockingIOError):  # held: a builder would wait
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                holder.send_signal(signal.SIGKILL)
                holder.wait()
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free once its holder died
        finally:
            holder.kill()


def _start(env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", USE_THE_DEVICE],
        env=env,
        cwd=cwd,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )


@pytest.mark.long
@pytest.mark.timeout(3600)  # two cold builds, on two cores shared with whatever else runs
def test_a_build_killed_half_way_blocks_nobody_and_racing_processes_build_once(
    tmp_path: Path,
) -> None:
    """A cold cache: a build is killed (its whole process group, SIGKILL) while it compiles; two
    processes started together then both load the device, and only one of them builds."""
    extensions = tmp_path / "torch_extensions"
    env = {**os.environ, "SPYRE_EXTENSIONS_DIR": str(extensions)}
    directory = _build.build_dir(SpyreConfig(extensions_dir=extensions))
    killed = _start(env, tmp_path)
    staging = directory.with_name(f"{directory.name}.building-{killed.pid}")
    baton = staging / _build.BATON  # cpp_extension's lock file: its existence is the lock
    while not ((staging / "build.ninja").exists() and baton.exists()):  # compiling now
        assert killed.poll() is None, killed.communicate()
        time.sleep(0.1)
    os.killpg(killed.pid, signal.SIGKILL)
    killed.communicate()
    # what used to make every later process wait forever: a baton with no owner
    assert baton.exists() and not directory.exists()

    racers = [_start(env, tmp_path) for _ in range(2)]
    ends = [(p.communicate(timeout=1800), p.returncode) for p in racers]
    for (out, err), code in ends:
        assert code == 0, err[-3000:]
        assert out.strip() == "[3.0, 3.0]"
    logs = "".join(err for (_, err), _ in ends)
    assert logs.count("building the spyre C++ core") == 1, logs
    assert "clearing an unfinished build and its lock file" in logs
    assert not staging.exists()
    marker = json.loads((directory / _build.MARKER).read_text())
    assert (marker["torch_version"], marker["torch_git"]) == (
        torch.__version__,
        torch.version.git_version,
    )
    print(f"cold build of the spyre C++ core: {marker['seconds']} s")
