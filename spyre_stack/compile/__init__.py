"""``torch.compile(backend="spyre")``: FX graphs lowered to simulator kernels.

See :mod:`spyre_stack.compile.backend` for the lowering (pointwise fusion, matmul + epilogue,
softmax and layer-norm patterns, eager fallback with reasons) and
:mod:`spyre_stack.compile.registration` for how the name ``"spyre"`` reaches dynamo without
importing it at ``register()`` time.
"""

from __future__ import annotations

from typing import Any


def spyre_backend(gm: Any, example_inputs: Any, **kwargs: Any) -> Any:
    """The dynamo backend (imports the heavy parts on first use)."""
    from spyre_stack.compile.backend import compile_graph

    return compile_graph(gm, example_inputs, **kwargs)


def reports() -> list[Any]:
    """Lowering reports of the graphs compiled in this process (kernels and fallbacks)."""
    from spyre_stack.compile.backend import REPORTS

    return list(REPORTS)
