"""The simulator: the driver-side model of a Spyre card (plain Python, no torch.library code).

* :mod:`.hardware` - the card's published figures and the documented assumptions added to them.
* :mod:`.numerics` - the dtype policy table (device precision, down-casts, host-only dtypes).
* :mod:`.layout` - sticks: 128-byte blocks, innermost dimension padded to whole sticks.
* :mod:`.tiling` - scratchpad tiling plans over the 32 cores on the ring.
* :mod:`.cost` - the kernel-time cost model.
* :mod:`.trace` - per-op records and the ``spyre_stack.trace()`` context manager.

Every time shown by the simulator is an *estimate* from the cost model, not a measurement.
"""
