"""The shard harness against real pytest child processes: crashes and hangs are recorded and the
rest of the shard continues in a fresh process; nothing finished is lost or run twice."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from workers.harness.collecting import CollectingLauncher
from workers.harness.launchers import FreshProcessLauncher, Launcher, WarmPool
from workers.harness.runner import TestOutcome, run_shard

MODULE = textwrap.dedent(
    """
    import os, signal, time, unittest
    import pytest

    COUNTER = os.environ["HARNESS_COUNTER"]
    with open(os.environ["HARNESS_COUNTER"] + ".imports", "a") as f:
        f.write("imported\\n")  # once per collection of this module

    def _count(name):
        with open(COUNTER, "a") as f:
            f.write(name + "\\n")

    def test_a_passes():
        _count("a")

    def test_b_fails():
        _count("b")
        assert 1 == 2, "one is not two"

    def test_c_segfaults():
        _count("c")
        os.kill(os.getpid(), signal.SIGSEGV)

    def test_d_passes_after_crash():
        _count("d")

    def test_e_hangs():
        _count("e")
        time.sleep(600)

    def test_f_passes_after_hang():
        _count("f")

    @pytest.mark.skip(reason="not on this device")
    def test_g_skipped():
        pass

    @pytest.mark.xfail(reason="known bug", strict=False)
    def test_h_xfails():
        assert 2 + 2 == 5, "the known bug still bites"

    def test_i_exits_hard():
        _count("i")
        os._exit(7)

    class TestStyle(unittest.TestCase):
        def test_j_unittest_passes(self):
            _count("j")

    @pytest.fixture
    def broken():
        raise RuntimeError("fixture broke")

    def test_k_setup_error(broken):
        pass
    """
)

EXPECTED = {
    "test_a_passes": "passed",
    "test_b_fails": "failed",
    "test_c_segfaults": "crashed",
    "test_d_passes_after_crash": "passed",
    "test_e_hangs": "timeout",
    "test_f_passes_after_hang": "passed",
    "test_g_skipped": "skipped",
    "test_h_xfails": "xfailed",
    "test_i_exits_hard": "crashed",
    "TestStyle::test_j_unittest_passes": "passed",
    "test_k_setup_error": "error",
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "test_shard_sample.py").write_text(MODULE)
    return tmp_path


@pytest.fixture(params=["fresh", "warm", "collecting"])
def launcher(request: pytest.FixtureRequest, project: Path) -> Iterator[Launcher]:
    env = {
        **os.environ,
        "HARNESS_COUNTER": str(project / "counter.txt"),
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        "OMP_NUM_THREADS": "1",
    }
    made: Launcher
    if request.param == "fresh":
        made = FreshProcessLauncher(cwd=project, env=env)
    elif request.param == "warm":
        made = WarmPool(cwd=project, env=env, preload=["json", "pytest"])
    else:  # the warm pool behind module servers: each module collected once
        made = CollectingLauncher(WarmPool(cwd=project, env=env, preload=["json", "pytest"]))
    try:
        yield made
    finally:
        made.close()


def test_crash_and_hang_do_not_lose_results(project: Path, launcher: Launcher) -> None:
    ids = [f"test_shard_sample.py::{name}" for name in EXPECTED]
    seen: list[TestOutcome] = []
    run = run_shard(
        ids,
        launcher=launcher,
        pytest_args=["--rootdir", str(project)],
        per_test_timeout=5,
        workdir=project / "work",
        on_result=seen.append,
    )
    got = {r.test_id.split("::", 1)[1]: r.outcome for r in run.results}
    assert got == EXPECTED
    # one child for the start, one after each crash (2) and after the hang (1)
    assert run.children == 4
    # every test body ran exactly once: nothing finished was re-run after a crash
    ran = (project / "counter.txt").read_text().split()
    assert sorted(ran) == sorted(["a", "b", "c", "d", "e", "f", "i", "j"])
    # the module was collected by every child, or once for all of them by its module server
    imports = (project / "counter.txt.imports").read_text().split()
    assert len(imports) == (1 if isinstance(launcher, CollectingLauncher) else 4)
    # results were streamed as they finished, each exactly once
    assert sorted(r.test_id for r in seen) == sorted(ids)
    by_name = {r.test_id.split("::", 1)[1]: r for r in run.results}
    assert "one is not two" in (by_name["test_b_fails"].message or "")
    assert (
        by_name["test_b_fails"].artifact_path
        and Path(by_name["test_b_fails"].artifact_path).read_text().count("one is not two") >= 1
    )
    assert "SIGSEGV" in (by_name["test_c_segfaults"].message or "")
    assert "exit code 7" in (by_name["test_i_exits_hard"].message or "")
    assert "per-test timeout of 5 s" in (by_name["test_e_hangs"].message or "")
    assert by_name["test_g_skipped"].message == "not on this device"
    # an expected failure keeps why it was expected and how it failed (full text: artifact)
    xfailed = by_name["test_h_xfails"]
    assert xfailed.message is not None
    assert xfailed.message.startswith("xfail (known bug): ")
    assert "the known bug still bites" in xfailed.message
    assert xfailed.artifact_path and "2 + 2" in Path(xfailed.artifact_path).read_text()


def test_unknown_test_ids_are_reported_not_run(project: Path, launcher: Launcher) -> None:
    run = run_shard(
        ["test_shard_sample.py::test_does_not_exist"],
        launcher=launcher,
        pytest_args=["--rootdir", str(project)],
        per_test_timeout=30,
        workdir=project / "work2",
    )
    assert [r.outcome for r in run.results] == ["not_run"]
    assert "test_does_not_exist" in (run.results[0].message or "")


def test_an_unknown_id_does_not_stop_the_known_ids_of_its_file(
    project: Path, launcher: Launcher
) -> None:
    """pytest runs nothing when one node id is not found: the runner reports that id and runs the
    others (a shard planned for another torch's tests must not end all not_run)."""
    ids = ["test_shard_sample.py::test_a_passes", "test_shard_sample.py::test_does_not_exist"]
    ids.append("test_shard_sample.py::test_b_fails")
    run = run_shard(
        ids,
        launcher=launcher,
        pytest_args=["--rootdir", str(project)],
        per_test_timeout=30,
        workdir=project / "work-mixed",
    )
    assert [r.outcome for r in run.results] == ["passed", "not_run", "failed"]
    assert (run.results[1].message or "").startswith("not found:")


def test_a_module_that_fails_to_import_is_an_error_with_the_import_error(
    project: Path, launcher: Launcher
) -> None:
    """Its tests could not run: ``error``, the exception line first in the message, the full
    collection error as the artifact; the other file's tests run as ever."""
    (project / "test_broken_import.py").write_text(
        "import os\nfrom os.path import renamed_helper\n\n\ndef test_one():\n    pass\n\n\n"
        "class TestTwo:\n    def test_two(self):\n        pass\n"
    )
    ids = [
        "test_broken_import.py::test_one",
        "test_broken_import.py::TestTwo::test_two",
        "test_shard_sample.py::test_a_passes",
    ]
    run = run_shard(
        ids,
        launcher=launcher,
        pytest_args=["--rootdir", str(project)],
        per_test_timeout=30,
        workdir=project / "w7",
    )
    by_id = {r.test_id: r for r in run.results}
    assert [r.outcome for r in run.results] == ["error", "error", "passed"]
    for test_id in ids[:2]:
        message = by_id[test_id].message or ""
        assert message.startswith(
            "collection failed: ImportError: cannot import name 'renamed_helper' from"
        ), message
        assert "test_broken_import.py" in message
        artifact = by_id[test_id].artifact_path
        assert artifact and "renamed_helper" in Path(artifact).read_text()


def test_one_child_per_test_file(project: Path, launcher: Launcher) -> None:
    (project / "test_other_file.py").write_text("def test_elsewhere():\n    assert True\n")
    ids = [
        "test_shard_sample.py::test_a_passes",
        "test_other_file.py::test_elsewhere",
        "test_shard_sample.py::TestStyle::test_j_unittest_passes",
    ]
    run = run_shard(
        ids,
        launcher=launcher,
        pytest_args=["--rootdir", str(project)],
        per_test_timeout=30,
        workdir=project / "work3",
    )
    assert [r.outcome for r in run.results] == ["passed", "passed", "passed"]
    assert run.children == 2


MANY = textwrap.dedent(
    """
    import unittest

    class TestMany(unittest.TestCase):
        pass

    for i in range(200):
        setattr(TestMany, f"test_{i}", lambda self, i=i: self.assertLess(i, 1000))
    """
)

COUNT_BUILT = textwrap.dedent(
    """
    import pytest
    from _pytest.unittest import UnitTestCase

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(collector):
        # the tests pytest built of a unittest class, matched to the ids it was given or not
        report = yield
        if isinstance(collector, UnitTestCase):
            with open("built.txt", "a") as f:
                f.write(f"{collector.name}={len(report.result or [])}\\n")
        return report
    """
)


def test_a_child_builds_only_the_unittest_tests_it_was_given(
    project: Path, launcher: Launcher
) -> None:
    """A device-generic class holds thousands of tests: a child given a few by name builds only
    those (the others are gone from the class before pytest collects it), and they run."""
    (project / "test_many.py").write_text(MANY)
    (project / "conftest.py").write_text(COUNT_BUILT)
    ids = ["test_many.py::TestMany::test_3", "test_many.py::TestMany::test_150"]
    run = run_shard(
        ids,
        launcher=launcher,
        pytest_args=["--rootdir", str(project)],
        per_test_timeout=30,
        workdir=project / "work4",
    )
    assert [(r.test_id, r.outcome) for r in run.results] == [(t, "passed") for t in ids]
    # a module server (RELAY_MODULE_SERVERS) collects its whole module once, by design
    whole = isinstance(launcher, CollectingLauncher)
    assert (project / "built.txt").read_text().split() == [
        "TestMany=200" if whole else "TestMany=2"
    ]


GENERIC = textwrap.dedent(
    """
    import unittest

    class TestShared(unittest.TestCase):
        # tests a device-generic class inherits (from a base of the generic class, as
        # instantiate_device_type_tests' classes do), a class collected itself as well
        def test_shared_7(self):
            self.assertEqual(7, 8, "seven is not eight")

    for i in range(100):
        if i != 7:
            setattr(TestShared, f"test_shared_{i}", lambda self, i=i: self.assertLess(i, 1000))

    class TestGenericCPU(TestShared):
        device_type = "cpu"

        def test_shared_7(self):  # overridden on the device class: passes there
            self.assertEqual(self.device_type, "cpu")

        def test_shared_5(self):  # overridden, calling the test it overrides
            super().test_shared_5()
            self.assertEqual(self.device_type, "cpu")

    for i in range(100):
        setattr(TestGenericCPU, f"test_own_{i}_cpu", lambda self, i=i: self.assertLess(i, 1000))
    """
)


def _plain_pytest(project: Path, ids: list[str]) -> dict[str, str]:
    """The outcome of each of ``ids`` in one plain pytest run, no plugin of ours."""
    plain = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", *ids],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
    )
    return {
        line.split()[1]: line.split()[0].lower()
        for line in plain.stdout.splitlines()
        if line.startswith(("PASSED ", "FAILED ", "ERROR "))
    }


def test_a_child_builds_only_the_inherited_unittest_tests_it_was_given(
    project: Path, launcher: Launcher
) -> None:
    """The tests a device-generic class inherits are not built either, unless given, and the class
    it inherits them from, trimmed for its own id first, is found whole again: a test of the base
    class, an inherited one and an overridden one run as plain pytest runs them, and so does a
    test calling the one it overrides, of a base trimmed after."""
    (project / "test_generic.py").write_text(GENERIC)
    (project / "conftest.py").write_text(COUNT_BUILT)
    ids = [
        "test_generic.py::TestShared::test_shared_7",
        "test_generic.py::TestGenericCPU::test_shared_3",  # inherited
        "test_generic.py::TestGenericCPU::test_shared_7",  # overridden
        "test_generic.py::TestGenericCPU::test_own_50_cpu",
    ]
    run = run_shard(
        ids,
        launcher=launcher,
        pytest_args=["--rootdir", str(project)],
        per_test_timeout=30,
        workdir=project / "work5",
    )
    built = (project / "built.txt").read_text().split()
    plain = _plain_pytest(project, ids)
    assert plain == dict(zip(ids, ["failed", "passed", "passed", "passed"], strict=True))
    assert {r.test_id: r.outcome for r in run.results} == plain
    whole = isinstance(launcher, CollectingLauncher)  # a module server builds its whole module
    assert built == (
        ["TestShared=100", "TestGenericCPU=200"] if whole else ["TestShared=1", "TestGenericCPU=3"]
    )

    calling_up = [
        "test_generic.py::TestGenericCPU::test_shared_5",
        ids[0],
    ]  # the base collected last
    run = run_shard(
        calling_up,
        launcher=launcher,
        pytest_args=["--rootdir", str(project)],
        per_test_timeout=30,
        workdir=project / "work6",
    )
    plain = _plain_pytest(project, calling_up)
    assert plain == dict(zip(calling_up, ["passed", "failed"], strict=True))
    assert {r.test_id: r.outcome for r in run.results} == plain


def test_a_warm_pool_started_ahead_serves_the_first_shard(project: Path) -> None:
    """A worker at boot: ``spawn`` starts the server from the main thread and ``warm`` waits for
    it in a thread that then ends (the server lives on); a shard asking meanwhile waits for
    that same server rather than starting a second."""
    import threading

    env = {
        **os.environ,
        "HARNESS_COUNTER": str(project / "counter.txt"),
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        "OMP_NUM_THREADS": "1",
    }
    pool = WarmPool(cwd=project, env=env, preload=["json", "pytest"])
    try:
        pool.spawn()
        server = pool._server
        warming = threading.Thread(target=pool.warm)
        warming.start()
        run = run_shard(
            ["test_shard_sample.py::test_a_passes"],
            launcher=pool,
            pytest_args=["--rootdir", str(project)],
            per_test_timeout=30,
            workdir=project / "w",
        )
        warming.join(timeout=60)
        assert server is not None and server.poll() is None and pool._server is server
        assert [r.outcome for r in run.results] == ["passed"]
        pool.warm()  # already up: the same server
        assert pool._server is server
    finally:
        pool.close()


def test_warnings_as_errors_do_not_stop_a_warm_child(project: Path, launcher: Launcher) -> None:
    """The warm pool preloads pytest's plugins, which pytest then cannot assertion-rewrite and
    would warn about: under ``filterwarnings = error`` that warning must not stop the child."""
    (project / "pytest.ini").write_text("[pytest]\nfilterwarnings =\n    error\n")
    run = run_shard(
        ["test_shard_sample.py::test_a_passes"],
        launcher=launcher,
        pytest_args=["--rootdir", str(project)],
        per_test_timeout=30,
        workdir=project / "w6",
    )
    assert [r.outcome for r in run.results] == ["passed"], run.results[0].message


def test_every_frame_of_a_childs_stack_has_a_module(project: Path, launcher: Launcher) -> None:
    """Upstream's device-generic tests walk the stack several times a test, and ``inspect``
    scans every loaded module for a frame whose file no module has (``runpy``'s, for a server
    started with ``python -m``), each time: no launcher leaves such a frame under a test."""
    (project / "test_frames.py").write_text(
        "import inspect\n\n\ndef test_frames():\n"
        "    lost = [f.filename for f in inspect.stack(0) if inspect.getmodule(f.frame) is None]\n"
        "    assert lost == [], lost\n",
        encoding="utf-8",
    )
    run = run_shard(
        ["test_frames.py::test_frames"],
        launcher=launcher,
        pytest_args=["--rootdir", str(project)],
        per_test_timeout=60,
        workdir=project / "work-frames",
    )
    assert [(r.outcome, r.message) for r in run.results] == [("passed", None)]
