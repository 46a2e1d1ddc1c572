"""What `relay device info` and `python -m spyre_stack` print: cards, memory, policy, cache, table."""

from __future__ import annotations

from typing import Any


def device_info() -> dict[str, Any]:
    """Register the backend and describe it as plain data."""
    import torch

    import spyre_stack
    from spyre_stack import _build, device_model, optable
    from spyre_stack.runtime import state
    from spyre_stack.sim import numerics
    from spyre_stack.sim.hardware import CARD

    spyre_stack.register()
    cfg = state.config()
    sp = torch.spyre  # type: ignore[attr-defined]
    table = optable.load()
    model = device_model.load()
    return {
        "backend": state.BACKEND_NAME,
        "torch": torch.__version__,
        "cards": [
            {
                "index": i,
                "name": sp.get_device_name(i),
                "memory_capacity_bytes": sp.get_memory_capacity(i),
                "memory_allocated_bytes": sp.memory_allocated(i),
            }
            for i in range(sp.device_count())
        ],
        "cores_per_card": CARD.cores,
        "scratchpad_bytes_per_core": CARD.scratchpad_bytes,
        "peak_fp16_tflops_estimate": CARD.peak_flops / 1e12,
        "op_policy": state.op_policy(),
        "numerics": {str(d).removeprefix("torch."): p.mode for d, p in numerics.POLICY.items()},
        "build_cache": str(_build.build_dir(cfg)),
        "op_table": {"path": str(table.path), **table.summary(), "default": table.default_status},
        "device_model": {
            "path": str(model.path),
            "mode": state.device_model_mode(),
            "rows": [
                {
                    "kind": r.kind,
                    "subject": r.subject,
                    "card": r.card,
                    "error": r.error,
                    "source": r.source,
                }
                for r in model.rows
            ],
        },
    }


def format_info(info: dict[str, Any]) -> str:
    gib = 1024**3
    lines = [f"spyre backend (simulated IBM Spyre, torch {info['torch']})"]
    for card in info["cards"]:
        lines.append(
            f"  spyre:{card['index']}  {card['name']}  memory "
            f"{card['memory_allocated_bytes'] / gib:.2f} / {card['memory_capacity_bytes'] / gib:.2f} GiB"
        )
    lines.append(
        f"  {info['cores_per_card']} cores per card, "
        f"{info['scratchpad_bytes_per_core'] // 1024} KiB scratchpad per core, "
        f"~{info['peak_fp16_tflops_estimate']:.1f} Tflop/s fp16 (cost-model estimate)"
    )
    lines.append(f"op policy: {info['op_policy']}")
    lines.append("numerics: " + ", ".join(f"{k}={v}" for k, v in info["numerics"].items()))
    lines.append(f"build cache: {info['build_cache']}")
    t = info["op_table"]
    lines.append(
        f"op table: {t['path']}: {t['native']} native, {t['fallback']} fallback, "
        f"{t['unsupported']} unsupported; unlisted ops: {t['default']} (permissive) / "
        "unsupported (strict)"
    )
    lines += format_device_model(info["device_model"])
    return "\n".join(lines)


def format_device_model(model: dict[str, Any]) -> list[str]:
    """The support table: one line per row, its error and its source below it."""
    enforced = model["mode"] == "card"
    lines = [
        f"device model: {model['path']} (SPYRE_DEVICE_MODEL={model['mode']}: refused rows "
        + ("raise the card's error)" if enforced else "are reported, not enforced)")
    ]
    for row in model["rows"]:
        lines.append(f"  {row['kind']:8} {row['card']:8} {row['subject']}")
        if row["error"]:
            lines.append(f"  {'':17} raises: {row['error']}")
        lines.append(f"  {'':17} source: {row['source']}")
    return lines
