"""The test universe: every collectable variant of a backend's tests for a revision, with its spec
decision and duration, cached under ``var/inventory``.

* :mod:`.sources`: where test files come from (the bundled suites, or a PyTorch checkout);
* :mod:`.build`: collection (a pytest subprocess with :mod:`.collect_plugin`), the cache, spec
  decisions, durations, and :func:`universe_from_inventory`, the selector's universe;
* :mod:`.head`: the universe at a head revision that is not installed, from the change facts;
* :mod:`.importmap`: which upstream modules the universe's runs import (learned once);
* :mod:`.run`: run a sample of variants and check each against its spec decision.
"""

from inventory.build import (
    DEFAULT_CACHE_DIR,
    Inventory,
    InventoryKey,
    build_inventory,
    universe_from_inventory,
)
from inventory.sources import BundledSuites, CheckoutTests, InventoryError

__all__ = [
    "DEFAULT_CACHE_DIR",
    "BundledSuites",
    "CheckoutTests",
    "Inventory",
    "InventoryError",
    "InventoryKey",
    "build_inventory",
    "universe_from_inventory",
]
