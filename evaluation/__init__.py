"""How good the selection is: ground truth learned by running the FULL universe (injected
single-function faults, :mod:`.mutations` and :mod:`.groundtruth`; a release step under both
torches, :mod:`.release`) and the scores of the selector beside its baselines (:mod:`.scores`).
The selector never chooses what the ground truth runs."""
