"""Lowering of FX graphs (from ``torch.compile``) to Spyre simulator kernels.

The graph is first traced to aten by AOTAutograd (forward and backward graphs alike). Then:

1. **patterns** - ``aten._softmax`` / ``_log_softmax`` and the hand-written form
   ``exp(x - amax(x)) / sum(exp(...))`` become one *softmax* kernel; ``aten.native_layer_norm``
   and the hand-written ``var_mean -> sub -> rsqrt -> mul`` form become one *layer-norm* kernel;
   ``mm / addmm / bmm / baddbmm`` anchor a *matmul* kernel;
2. **pointwise fusion** - a pointwise node (table kinds ``pointwise`` / ``special``) joins the
   kernel that produces one of its inputs when its output has the same number of elements
   (epilogues of matmul, softmax and norm kernels included); otherwise it starts a new pointwise
   kernel. View ops are free and transparent (a view of a kernel's value counts as that value);
3. **fallback** - nodes whose op is not ``native`` in the op table run eagerly, one op each, and
   the reason is recorded in the lowering report.

At run time the kernels' member ops execute on the device (so results are the eager results,
within fp16 rounding); the per-op trace records are replaced by one record per fused kernel, whose
sticks are only the kernel's external inputs and outputs, costed with the cost model.
"""

from __future__ import annotations

import logging
import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx

import spyre_stack.optable as optable
from spyre_stack.sim import cost, trace
from spyre_stack.sim.cost import TensorMeta

log = logging.getLogger(__name__)

VIEW_OPS = {
    "view",
    "_unsafe_view",
    "reshape",
    "t",
    "transpose",
    "permute",
    "expand",
    "squeeze",
    "unsqueeze",
    "alias",
    "slice",
    "select",
    "detach",
    "as_strided",
    "unfold",
    "split",
    "split_with_sizes",
    "unbind",
    "diagonal",
    "narrow",
    "view_as",
    "expand_as",
}
MATMUL_OPS = {"mm", "addmm", "bmm", "baddbmm"}
SOFTMAX_OPS = {"_softmax", "_log_softmax"}
NORM_OPS = {"native_layer_norm"}
POINTWISE_KINDS = {"pointwise", "special"}


@dataclass
class Kernel:
    kind: str  # pointwise | matmul | softmax | norm | single
    nodes: list[fx.Node] = field(default_factory=list)

    @property
    def name(self) -> str:
        return {
            "pointwise": "spyre::fused_pointwise",
            "matmul": "spyre::matmul",
            "softmax": "spyre::softmax",
            "norm": "spyre::layer_norm",
        }.get(self.kind, "spyre::kernel")


@dataclass
class LoweringReport:
    kernels: list[tuple[str, list[str]]] = field(default_factory=list)
    fallbacks: list[tuple[str, str]] = field(default_factory=list)  # (node, reason)
    nodes: int = 0


REPORTS: list[LoweringReport] = []


def _base(node: fx.Node) -> str | None:
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return None
    return optable.base_name(node.target._schema.name)


def _numel(node: Any) -> int | None:
    val = node.meta.get("val") if isinstance(node, fx.Node) else None
    if isinstance(val, torch.Tensor):
        try:
            return int(math.prod(int(s) for s in val.shape))
        except (TypeError, ValueError):
            return None
    return None


class Lowering:
    def __init__(self, gm: fx.GraphModule) -> None:
        self.gm = gm
        self.table = optable.load()
        self.kernel_of: dict[fx.Node, Kernel] = {}
        self.kernels: list[Kernel] = []
        self.report = LoweringReport(nodes=len(gm.graph.nodes))

    # ---------------------------------------------------------------- helpers
    def source(self, node: Any) -> Any:
        """Follow view ops back to the node that produced the data."""
        while isinstance(node, fx.Node) and _base(node) in VIEW_OPS:
            node = node.args[0]
        return node

    def new_kernel(self, kind: str, *nodes: fx.Node) -> Kernel:
        k = Kernel(kind, list(nodes))
        self.kernels.append(k)
        for n in nodes:
            self.kernel_of[n] = k
        return k

    def users_through_views(self, node: fx.Node) -> list[fx.Node]:
        out: list[fx.Node] = []
        for u in node.users:
            if _base(u) in VIEW_OPS:
                out.extend(self.users_through_views(u))
            else:
                out.append(u)
        return out

    # ---------------------------------------------------------------- patterns
    def match_manual_softmax(self, div: fx.Node) -> list[fx.Node] | None:
        if _base(div) != "div" or len(div.args) < 2:
            return None
        num, den = (self.source(a) for a in div.args[:2])
        if not (
            isinstance(den, fx.Node) and _base(den) == "sum" and self.source(den.args[0]) is num
        ):
            return None
        if not (isinstance(num, fx.Node) and _base(num) == "exp"):
            return None
        sub = self.source(num.args[0])
        if not (isinstance(sub, fx.Node) and _base(sub) == "sub"):
            return None
        amax = self.source(sub.args[1])
        if not (isinstance(amax, fx.Node) and _base(amax) in ("amax", "max")):
            return None
        members = [amax, sub, num, den, div]
        return members if all(n not in self.kernel_of for n in members) else None

    def match_manual_layer_norm(self, mul: fx.Node) -> list[fx.Node] | None:
        if _base(mul) != "mul":
            return None
        a, b = (self.source(x) for x in mul.args[:2])
        for sub, rsqrt in ((a, b), (b, a)):
            if not (isinstance(sub, fx.Node) and _base(sub) == "sub"):
                continue
            if not (isinstance(rsqrt, fx.Node) and _base(rsqrt) == "rsqrt"):
                continue
            add = self.source(rsqrt.args[0])
            chain = [rsqrt]
            if isinstance(add, fx.Node) and _base(add) == "add":
                chain.append(add)
                var = self.source(add.args[0])
            else:
                var = add
            stats: list[fx.Node] = []
            if isinstance(var, fx.Node) and var.target is operator.getitem:
                vm = var.args[0]
                if isinstance(vm, fx.Node) and _base(vm) == "var_mean":
                    stats = [vm, *[u for u in vm.users if u.target is operator.getitem]]
            elif isinstance(var, fx.Node) and _base(var) == "var":
                stats = [var]
            if not stats:
                continue
            members = [*stats, *chain, sub, mul]
            if sub.args and isinstance(sub.args[1], fx.Node):
                mean = self.source(sub.args[1])
                if _base(mean) == "mean":
                    members.insert(0, mean)
            if all(n not in self.kernel_of for n in members):
                return members
        return None

    # ---------------------------------------------------------------- partition
    def partition(self) -> None:
        nodes = list(self.gm.graph.nodes)
        for node in nodes:  # patterns first: they claim their members
            if node.op != "call_function":
                continue
            members = self.match_manual_softmax(node)
            if members:
                self.new_kernel("softmax", *members)
                continue
            members = self.match_manual_layer_norm(node)
            if members:
                self.new_kernel("norm", *members)
        for node in nodes:
            if node.op != "call_function" or node in self.kernel_of:
                continue
            if node.target is operator.getitem:
                src = node.args[0]
                if isinstance(src, fx.Node) and src in self.kernel_of:
                    self.kernel_of[node] = self.kernel_of[src]
                    self.kernel_of[src].nodes.append(node)
                continue
            base = _base(node)
            if base is None:
                self.report.fallbacks.append((node.name, f"{node.target} is not an aten op"))
                continue
            if base in VIEW_OPS:
                continue
            status = self.table.status(base)
            kind = self.table.kind(base)
            if status != "native":
                self.report.fallbacks.append(
                    (node.name, f"aten::{base} is {status} in the op table: runs eagerly")
                )
                continue
            if base in MATMUL_OPS:
                self.new_kernel("matmul", node)
            elif base in SOFTMAX_OPS:
                self.new_kernel("softmax", node)
            elif base in NORM_OPS:
                self.new_kernel("norm", node)
            elif kind in POINTWISE_KINDS:
                self.place_pointwise(node)
            else:
                self.new_kernel("single", node)
        for k in self.kernels:
            self.report.kernels.append((k.name, [n.name for n in k.nodes]))

    def place_pointwise(self, node: fx.Node) -> None:
        numel = _numel(node)
        for arg in node.all_input_nodes:
            src = self.source(arg)
            k = self.kernel_of.get(src) if isinstance(src, fx.Node) else None
            if k is None or k.kind == "single":
                continue
            anchor_numel = _numel(k.nodes[-1]) if k.kind != "norm" else _numel(src)
            if (
                numel is not None
                and numel == _numel(src)
                and (anchor_numel is None or numel == anchor_numel or k.kind == "pointwise")
            ):
                k.nodes.append(node)
                self.kernel_of[node] = k
                return
        self.new_kernel("pointwise", node)


class SpyreProgram:
    """Runs a lowered graph: member ops execute on the device; one trace record per kernel."""

    def __init__(self, gm: fx.GraphModule, lowering: Lowering) -> None:
        self.gm = gm
        self.lowering = lowering
        self.nodes = list(gm.graph.nodes)
        self.last_node = {
            id(k): max(self.nodes.index(n) for n in k.nodes) for k in lowering.kernels
        }
        self.report = lowering.report

    def __call__(self, *args: Any) -> Any:
        env: dict[fx.Node, Any] = {}
        arg_iter = iter(args)
        kernel_of = self.lowering.kernel_of
        tracing = trace.tracing()
        for index, node in enumerate(self.nodes):
            if node.op == "placeholder":
                env[node] = next(arg_iter)
                continue
            if node.op == "output":
                return fx.node.map_arg(node.args[0], lambda n: env[n])
            if node.op == "get_attr":
                env[node] = getattr(self.gm, str(node.target))
                continue
            fn_args = fx.node.map_arg(node.args, lambda n: env[n])
            fn_kwargs = fx.node.map_arg(node.kwargs, lambda n: env[n])
            kernel = kernel_of.get(node)
            target: Callable[..., Any] = node.target
            if kernel is not None and tracing:
                with trace.suppressed():
                    env[node] = target(*fn_args, **fn_kwargs)
                if self.last_node[id(kernel)] == index:
                    trace.emit(self.kernel_record(kernel, env))
            elif _base(node) in VIEW_OPS:
                with trace.suppressed():
                    env[node] = target(*fn_args, **fn_kwargs)
            else:
                env[node] = target(*fn_args, **fn_kwargs)
        return None

    def kernel_record(self, kernel: Kernel, env: dict[fx.Node, Any]) -> trace.OpRecord:
        members = set(kernel.nodes)
        inputs: list[TensorMeta] = []
        seen: set[int] = set()
        for n in kernel.nodes:
            for arg in n.all_input_nodes:
                src = self.lowering.source(arg)
                if src in members or not isinstance(env.get(arg), torch.Tensor):
                    continue
                if id(src) in seen:
                    continue
                seen.add(id(src))
                inputs.append(_meta(env[arg]))
        outputs: list[TensorMeta] = []
        for n in kernel.nodes:
            value = env.get(n)
            if not isinstance(value, torch.Tensor):
                continue
            users = self.lowering.users_through_views(n)
            if any(u not in members for u in users):
                outputs.append(_meta(value))
        member_metas = [
            (
                n,
                [_meta(env[a]) for a in n.all_input_nodes if isinstance(env.get(a), torch.Tensor)],
                [_meta(env[n])] if isinstance(env.get(n), torch.Tensor) else [],
            )
            for n in kernel.nodes
        ]
        est = estimate_fused(kernel.kind, member_metas, inputs, outputs)
        device = next(
            (env[n].device.index for n in kernel.nodes if isinstance(env.get(n), torch.Tensor)), 0
        )
        names = "+".join(b for b in (_base(n) for n in kernel.nodes) if b)
        return trace.record_from_estimate(
            kernel.name,
            names,
            "native",
            kernel.kind,
            device or 0,
            inputs,
            outputs,
            est,
            note=f"fused {len(kernel.nodes)} ops",
        )


def _meta(t: torch.Tensor) -> TensorMeta:
    return TensorMeta(tuple(int(s) for s in t.shape), t.dtype)


def estimate_fused(
    kind: str,
    members: Sequence[tuple[fx.Node, list[TensorMeta], list[TensorMeta]]],
    inputs: Sequence[TensorMeta],
    outputs: Sequence[TensorMeta],
) -> cost.Estimate:
    """A fused kernel: compute is the sum of its members' compute, data movement only its
    external inputs and outputs, one launch."""
    table = optable.load()
    compute = 0.0
    ring = 0.0
    plan = None
    for node, ins, outs in members:
        base = _base(node)
        if base is None or not outs:
            continue
        member = cost.estimate_native(table.kind(base), base, ins, outs)
        compute += member.compute_us
        ring = max(ring, member.ring_us)
        if plan is None or (member.plan and member.plan.scratchpad_bytes > plan.scratchpad_bytes):
            plan = member.plan
    moved = sum(t.sticks for t in inputs) + sum(t.sticks for t in outputs)
    memory = moved * 128 / cost.CARD.memory_bandwidth * 1e6
    return cost.Estimate(compute, memory, ring, cost.CARD.launch_us, moved, plan)


def compile_graph(
    gm: fx.GraphModule, example_inputs: Sequence[Any], **kwargs: Any
) -> Callable[..., Any]:
    """The dynamo backend: AOTAutograd to aten, then lower each graph (forward and backward)."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def lower(aten_gm: fx.GraphModule, aten_inputs: Sequence[Any]) -> Callable[..., Any]:
        lowering = Lowering(aten_gm)
        lowering.partition()
        REPORTS.append(lowering.report)
        for node_name, reason in lowering.report.fallbacks:
            log.info("spyre compile: %s falls back to eager: %s", node_name, reason)
        program = SpyreProgram(aten_gm, lowering)
        return make_boxed_func(program)

    return aot_autograd(fw_compiler=lower, bw_compiler=lower)(gm, example_inputs, **kwargs)
