"""The test universe: every collectable variant of a backend's tests for a revision, with its spec
decision and duration, cached under ``RELAY_VAR_DIR/inventory`` (per host).

* :mod:`.sources`: where test files come from (the bundled suites, or a PyTorch checkout);
* :mod:`.build`: collection (a pytest subprocess with :mod:`.collect_plugin`), the cache, spec
  decisions, durations, and :func:`~.build.universe_from_inventory`, the selector's universe;
* :mod:`.head`: the universe at a head revision that is not installed, from the change facts;
* :mod:`.importmap`: which upstream modules the universe's runs import (learned once);
* :mod:`.run`: run a sample of variants and check each against its spec decision.

The package imports nothing itself: its pytest plugins (:mod:`.collect_plugin`, :mod:`.importmap`)
load in every collection and test process, which must not pay for the rest.
"""
