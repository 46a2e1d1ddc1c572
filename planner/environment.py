"""The upstream a job tests, decided from its event (DESIGN.md, "The upstream under test").

:func:`decide_environment` is pure: the event, what this host has to test it with (a checkout,
a head wheel) and the files the change touches give an
:class:`~upstream.undertest.UpstreamUnderTest` with its reason. The shard workers resolve it
(:func:`upstream.undertest.resolve_environment`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from upstream.overlay import OverlayError, base_release
from upstream.undertest import UpstreamUnderTest
from wire.github.events import UpstreamEvent

#: folders whose changes are compiled into torch's binaries (no Python overlay covers them)
COMPILED_DIRS = ("aten/", "c10/", "torch/csrc/", "caffe2/", "third_party/", "cmake/", "torchgen/")
COMPILED_NAMES = frozenset(
    {
        "native_functions.yaml",
        "derivatives.yaml",
        "CMakeLists.txt",
        "setup.py",
        "build_variables.bzl",
        "BUILD.bazel",
        "BUCK.oss",
        "pyproject.toml",
        "requirements.txt",
    }
)
COMPILED_SUFFIXES = (".cpp", ".cc", ".c", ".h", ".hpp", ".cu", ".cuh", ".mm", ".cmake", ".bzl")


def is_compiled(path: str) -> bool:
    """Whether a change to ``path`` (repository-relative) needs a build to be tested."""
    name = PurePosixPath(path).name
    return (
        path.startswith(COMPILED_DIRS) or name in COMPILED_NAMES or name.endswith(COMPILED_SUFFIXES)
    )


def head_wheel_for(template: str | None, event: UpstreamEvent) -> str | None:
    """The configured head wheel of the event's head commit: a path or URL in which ``{sha}``
    and ``{pr}`` are replaced (None without a template or a head commit)."""
    head = event.head_sha or event.after_sha
    if not template or not head:
        return None
    return template.replace("{sha}", head).replace("{pr}", str(event.pr_number or ""))


def overlay_base_for(
    configured: str | None, checkout: Path | None, revs: tuple[str, str] | None
) -> tuple[str | None, str]:
    """The release an overlay lays the head over, and how it was chosen: the configured one
    (RELAY_OVERLAY_BASE), else the newest release tag the merge base of base..head descends
    from in the checkout, else None (the installed torch) with the reason."""
    if configured:
        return configured, f"{configured}, configured (RELAY_OVERLAY_BASE)"
    if checkout is None or revs is None:
        return None, ""
    try:
        found = base_release(checkout, *revs)
    except OverlayError as exc:
        return None, f"the installed torch ({exc})"
    if found.version is None:
        return None, f"the installed torch ({found.detail})"
    return found.version, found.detail


def same_release(a: str, b: str) -> bool:
    """Whether two torch versions or builds are the same release (``2.13.0+cpu``, ``2.13.0``)."""
    return a.split("+", 1)[0] == b.split("+", 1)[0]


def decide_environment(
    event: UpstreamEvent,
    *,
    installed_version: str,
    release_version: str | None = None,
    checkout: bool = False,
    head_wheel: str | None = None,
    overlay_base: str | None = None,
    overlay_base_note: str = "",
    changed_paths: Sequence[str] = (),
    smoke_untested: bool = False,
    checkout_note: str = "",
) -> UpstreamUnderTest:
    """The environment ``event``'s job runs in.

    ``installed_version``: the worker interpreter's torch (an environment too, named as such);
    ``release_version``: the head release of a replay step as resolved (``2.14.1``);
    ``checkout``: an upstream git checkout is configured; ``head_wheel``: the configured wheel of
    the head commit; ``overlay_base``: the release whose binaries an overlay uses (None: the
    installed torch), ``overlay_base_note`` how it was chosen; ``changed_paths``: the files base..head touches (compiled ones are named
    on the job when only an overlay tests the change); ``checkout_note``: why a configured
    checkout cannot serve (its head commit is not in it)."""
    if event.event == "periodic" and event.head_ref:
        version = release_version or event.head_ref
        if same_release(version, installed_version):
            return UpstreamUnderTest(
                torch_version=installed_version.split("+", 1)[0],
                torch_build=installed_version,
                reason=f"release {version} is the installed torch",
            )
        return UpstreamUnderTest(
            kind="release",
            torch_version=version,
            reason=f"release step {event.base_ref} -> {event.head_ref}: torch {version} in its own environment",
        )
    if event.event in ("nightly", "periodic"):
        return UpstreamUnderTest(
            torch_version=installed_version.split("+", 1)[0],
            torch_build=installed_version,
            reason=f"{event.event} run of the whole universe on the installed torch",
        )
    head = event.head_sha or event.after_sha
    if head_wheel and head:
        return UpstreamUnderTest(
            kind="head-wheel",
            head_sha=head,
            head_wheel=head_wheel,
            reason="the head commit's wheel (configured: RELAY_HEAD_WHEEL)",
        )
    if checkout and head:
        compiled = sorted(p for p in changed_paths if is_compiled(p))
        base = overlay_base or installed_version
        why = f"the head's torch/**.py laid over torch {base}"
        if overlay_base_note:
            why += f" (base: {overlay_base_note})"
        if compiled:
            why += f"; {len(compiled)} compiled file(s) changed that no overlay can test"
        return UpstreamUnderTest(
            kind="overlay",
            torch_version=overlay_base,
            head_sha=head,
            compiled_not_covered=compiled,
            reason=why,
        )
    reason = (
        "no upstream checkout (RELAY_UPSTREAM_PATH) and no head wheel (RELAY_HEAD_WHEEL): "
        "the change cannot be tested here"
    )
    if checkout_note:
        reason = f"{checkout_note} and no head wheel (RELAY_HEAD_WHEEL): the change cannot be tested here"
    if smoke_untested:
        return UpstreamUnderTest(
            torch_version=installed_version.split("+", 1)[0],
            torch_build=installed_version,
            smoke=True,
            reason=reason + "; smoke run on the installed torch (RELAY_SMOKE_UNTESTED)",
        )
    return UpstreamUnderTest(kind="none", reason=reason)
