"""The observability probes of ``relay eval --kind catch`` (:mod:`cli.catch`), run beside the
relay's jobs.

The probe needs the traced import map of the torch build and backend
(:func:`inventory.importmap.import_map_for`, learned once and cached under the host's
``RELAY_VAR_DIR/selector``, keyed by torch build, test files and backend version). Learning it
takes tens of minutes on a loaded machine, so :func:`start_learning` starts it when the command
starts, beside the relay's first jobs, and a probe waits for it only when the map is not learned
yet. :class:`ProbeQueue` probes each green mutant in a thread of its own as soon as its jobs are
in, while the next mutants' jobs run, so that a run cut short by its deadline has verdicts, not
a backlog. The probes run in overlays of their own (under the command's folder, not the relay's,
whose sweeper removes overlays no job needs).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from evaluation.localrepo import LocalUpstream
from evaluation.mutants import Mutant
from evaluation.observability import Probe

#: the probe of a mutant, given the SHAs of its branch and of its twin's
Prober = Callable[[Mutant, str, str], Probe]
MAP_TIMEOUT_SECONDS = 4 * 3600  # the traced run of every op and module, on a loaded machine


class LearnedMap:
    """The traced import map, learned in a thread started at once (:func:`start_learning`)."""

    def __init__(self, learn: Callable[[], Path | None], log: Callable[[str], None]) -> None:
        self._done = threading.Event()
        self._path: Path | None = None
        self._error: str | None = None
        self._log = log
        self.started = time.monotonic()
        # a daemon: a run stopped by its deadline does not wait for the map (its sample run, a
        # child process, finishes and caches it for the next run)
        threading.Thread(target=self._run, args=(learn,), daemon=True, name="import-map").start()

    def _run(self, learn: Callable[[], Path | None]) -> None:
        try:
            self._path = learn()
            if self._path is None:
                self._error = "no traced import map for this universe"
        except Exception as exc:  # reported on every probe that needed it
            self._error = f"{type(exc).__name__}: {str(exc).strip()[:200]}"
        self._log(
            f"traced import map: {self._path or self._error} "
            f"({time.monotonic() - self.started:.0f} s)"
        )
        self._done.set()

    def wait(self, timeout: float | None = None) -> Path:
        """The map's path once learned; RuntimeError when it could not be, TimeoutError when
        it is not learned within ``timeout`` seconds."""
        if not self._done.wait(None if timeout is None else max(0.0, timeout)):
            raise TimeoutError("the traced import map is still being learned")
        if self._path is None:
            raise RuntimeError(self._error or "no traced import map")
        return self._path


def start_learning(universe: Any, log: Callable[[str], None]) -> LearnedMap:
    """Learn (or find, when learned before) the traced import map of ``universe``."""
    from inventory.importmap import import_map_for

    log("traced import map: reused when learned before, else learned now (once per torch build)")
    return LearnedMap(lambda: import_map_for(universe, timeout=MAP_TIMEOUT_SECONDS), log)


def make_prober(
    repo: LocalUpstream,
    *,
    suites: Sequence[str],
    envs: Path,
    cache_dir: Path,
    deadline: float | None,
    log: Callable[[str], None],
) -> Prober:
    """The observability probe over the bundled universe (``suites``) under the backend's
    specs, in overlays under ``envs`` (made for the probes). Its map is learned from now on; a
    probe waits for it until ``deadline`` (``time.monotonic()``) at most."""
    from backends import get_backend
    from evaluation.observability import probe
    from inventory.build import universe_from_inventory
    from upstream.undertest import UpstreamUnderTest, resolve_environment

    specs = list(get_backend("spyre").default_specs)  # the runner's (RELAY_RUNNER_SPECS unset)
    universe = universe_from_inventory(specs=specs, suites=suites)
    learned = start_learning(universe, log)

    def prober(mutant: Mutant, mutant_sha: str, twin_sha: str) -> Probe:
        import_map = learned.wait(None if deadline is None else deadline - time.monotonic())
        mutant_env, twin_env = (
            resolve_environment(
                UpstreamUnderTest(kind="overlay", head_sha=sha), envs=envs, checkout=repo.path
            )
            for sha in (mutant_sha, twin_sha)
        )
        return probe(
            universe,
            mutant.symbol,
            import_map=import_map,
            mutant_env=mutant_env,
            twin_env=twin_env,
            cache_dir=cache_dir,
            log=log,
            specs=specs,
            labels={"mutant": mutant_sha[:12], "twin": twin_sha[:12]},
        )

    return prober
