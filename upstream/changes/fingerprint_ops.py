"""Behavioural fingerprints of the OpInfo database under one torch, on CPU (a script).

Run by :mod:`upstream.changes.behaviour` with the interpreter of each release's environment
(``python -P fingerprint_ops.py --out FILE``); it imports only torch and the standard library, so
it runs under any torch release without this project installed.

For every ``op_db`` entry (``name`` or ``name.variant``), on CPU, for every dtype it supports:
the sample inputs are built (seeded), the op is called on each, and, where the entry supports
autograd at that dtype, the gradient of its outputs (all-ones cotangents) is taken. Recorded:

- ``fwd`` / ``bwd``: the ATen operators the call and its backward dispatch, seen below autograd
  by a ``TorchDispatchMode``: what a PrivateUse1 backend is asked to run. A release that
  rewrites a C++ kernel, a decomposition or a backward formula changes this set even when its
  Python sources do not change;
- ``vals``: per sample a summary of the outputs and gradients (shape, dtype, a float64 sum and
  absolute sum of the finite values, NaN and infinity counts); ``["random"]`` for a sample whose
  output changes with the random seed;
- ``errors``: ``index:ExceptionType`` for samples that raise; ``n``: the number of samples;
- per entry, the dtypes it supports on CPU (forward and backward).

Output: JSON ``{"torch": version, "entries": {key: {...}}, "seconds": ...}``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
import warnings
from typing import Any

ENTRY_TIMEOUT = 120  # seconds one entry may take over all its dtypes


class _Timeout(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Timeout()


def _summary(torch: Any, value: Any) -> list[Any]:
    """Shape, dtype and sums of every tensor in ``value`` (a tensor, tuple, list or scalar)."""
    from torch.utils._pytree import tree_flatten

    out: list[Any] = []
    for leaf in tree_flatten(value)[0]:
        if not isinstance(leaf, torch.Tensor):
            out.append(
                repr(leaf)[:40] if isinstance(leaf, int | float | bool) else type(leaf).__name__
            )
            continue
        t = leaf.detach()
        if t.layout != torch.strided or t.is_quantized:
            out.append([list(t.shape), str(t.dtype), str(t.layout)])
            continue
        if t.is_complex():
            t = torch.view_as_real(t.resolve_conj())
        t = t.to(torch.float64)
        finite = torch.isfinite(t)
        kept = torch.where(finite, t, torch.zeros_like(t))
        out.append(
            [
                list(leaf.shape),
                str(leaf.dtype).replace("torch.", ""),
                float(kept.sum()),
                float(kept.abs().sum()),
                int(torch.isnan(t).sum()),
                int(torch.isinf(t).sum()),
            ]
        )
    return out


def _entry(torch: Any, op: Any, recorder: Any) -> dict[str, Any]:
    from torch.utils._pytree import tree_flatten

    dtypes = sorted(op.supported_dtypes("cpu"), key=str)
    backward = set(op.supported_backward_dtypes("cpu")) if op.supports_autograd else set()
    record: dict[str, Any] = {
        "dtypes": [str(d).replace("torch.", "") for d in dtypes],
        "backward_dtypes": sorted(str(d).replace("torch.", "") for d in backward),
        "by_dtype": {},
    }
    for dtype in dtypes:
        grad = dtype in backward and (dtype.is_floating_point or dtype.is_complex)
        fwd, bwd = recorder(), recorder()
        errors: list[str] = []
        vals: list[Any] = []
        torch.manual_seed(0)
        try:
            samples = list(op.sample_inputs("cpu", dtype, requires_grad=grad))
        except Exception as exc:  # the sample function itself fails at this dtype
            record["by_dtype"][str(dtype).replace("torch.", "")] = {"samples": type(exc).__name__}
            continue
        for i, sample in enumerate(samples):
            try:
                torch.manual_seed(1)
                with fwd:
                    result = op(sample.input, *sample.args, **sample.kwargs)
                row = _summary(torch, result)
                torch.manual_seed(2)  # a sample whose output follows the seed keeps no values
                if _summary(torch, op(sample.input, *sample.args, **sample.kwargs)) != row:
                    row = ["random"]
                if grad:
                    outs = [
                        t
                        for t in tree_flatten(result)[0]
                        if isinstance(t, torch.Tensor) and t.requires_grad and t.grad_fn is not None
                    ]
                    ins = [
                        t
                        for t in tree_flatten((sample.input, sample.args, sample.kwargs))[0]
                        if isinstance(t, torch.Tensor) and t.requires_grad
                    ]
                    if outs and ins:
                        with bwd:
                            grads = torch.autograd.grad(
                                outs, ins, [torch.ones_like(t) for t in outs], allow_unused=True
                            )
                        row.append(_summary(torch, [g for g in grads if g is not None]))
                vals.append(row)
            except _Timeout:
                raise
            except Exception as exc:
                errors.append(f"{i}:{type(exc).__name__}")
        record["by_dtype"][str(dtype).replace("torch.", "")] = {
            "fwd": sorted(fwd.ops),
            "bwd": sorted(bwd.ops),
            "errors": errors,
            "n": len(samples),
            "vals": vals,
        }
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--only", action="append", default=[], help="entry keys (repeatable)")
    parser.add_argument("--shard", default="0/1", help="i/n: every n-th entry from the i-th")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    import torch
    from torch.testing._internal.common_methods_invocations import op_db
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recorder(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: set[str] = set()

        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            self.ops.add(str(func))
            return func(*args, **(kwargs or {}))

    index, count = (int(x) for x in args.shard.split("/"))
    torch.set_num_threads(1)
    signal.signal(signal.SIGALRM, _alarm)
    start = time.perf_counter()
    entries: dict[str, Any] = {}
    mine = [op for i, op in enumerate(op_db) if i % count == index]
    for done, op in enumerate(mine):
        key = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        if args.only and key not in args.only:
            continue
        while key in entries:  # two entries of one name: keep both
            key += "#"
        began = time.perf_counter()
        signal.alarm(ENTRY_TIMEOUT)
        try:
            entries[key] = _entry(torch, op, Recorder)
        except _Timeout:
            entries[key] = {"timeout": ENTRY_TIMEOUT}
        except Exception as exc:  # the entry's metadata itself fails under this torch
            entries[key] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        finally:
            signal.alarm(0)
        entries[key]["seconds"] = round(time.perf_counter() - began, 3)
        if done % 50 == 49:
            print(f"fingerprints: {done + 1} of {len(mine)} entries", file=sys.stderr, flush=True)
    text = json.dumps(
        {
            "torch": torch.__version__,
            "entries": entries,
            "seconds": round(time.perf_counter() - start, 1),
        },
        sort_keys=True,
        allow_nan=True,
    )
    with open(args.out, "w", encoding="utf-8") as fh:
        fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
