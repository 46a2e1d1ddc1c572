"""Configuration of the simulated Spyre stack, read from the environment in one place.

Every ``SPYRE_*`` variable is read here and nowhere else; the values are built on demand (never at
import time) so tests can change the environment before :func:`spyre_stack.register` runs.

=====================================  =========================================================
variable                               meaning (default)
=====================================  =========================================================
``SPYRE_DEVICE_COUNT``                 number of simulated cards (2)
``SPYRE_MEMORY_BYTES``                 device-memory capacity per card in bytes (128 GiB)
``SPYRE_OP_POLICY``                    ``permissive`` (ops not in the table fall back to the
                                       host) or ``strict`` (ops not in the table raise)
``SPYRE_SILENCE_DOWNCAST_WARNING``     ``1`` silences the one-time fp32 -> fp16 warning
``SPYRE_DEVICE_MODEL``                 ``card`` (raise the errors the real card raises: the
                                       refused rows of ``spyre_stack/device_model.yaml``; the
                                       mode the bundled spec is promoted from) or ``simulator``
                                       (the simulator's own behaviour: float64 and complex on
                                       the host, copies inside the device) (``card``)
``SPYRE_EXTENSIONS_DIR``               build cache of the C++ core, a folder per torch build
                                       (``<repo>/var/torch_extensions`` in a writable checkout,
                                       else ``~/.cache/spyre_stack/torch_extensions``)
``SPYRE_BACKENDS_ENTRY_POINT``         ``1`` also installs ``torch.backends.spyre`` (off)
=====================================  =========================================================
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

GIB = 1024**3
DEFAULT_MEMORY_BYTES = 128 * GIB
POLICIES = ("permissive", "strict")
DEVICE_MODELS = ("simulator", "card")


@dataclass(frozen=True)
class SpyreConfig:
    device_count: int = 2
    memory_bytes: int = DEFAULT_MEMORY_BYTES
    op_policy: str = "permissive"
    silence_downcast_warning: bool = False
    extensions_dir: Path = Path("var/torch_extensions")
    backends_entry_point: bool = False
    device_model: str = "card"

    @classmethod
    def from_env(cls) -> SpyreConfig:
        env = os.environ
        policy = env.get("SPYRE_OP_POLICY", "permissive").strip().lower()
        if policy not in POLICIES:
            raise ValueError(f"SPYRE_OP_POLICY must be one of {POLICIES}, got {policy!r}")
        model = env.get("SPYRE_DEVICE_MODEL", "card").strip().lower()
        if model not in DEVICE_MODELS:
            raise ValueError(f"SPYRE_DEVICE_MODEL must be one of {DEVICE_MODELS}, got {model!r}")
        count = int(env.get("SPYRE_DEVICE_COUNT", "2"))
        if not 1 <= count <= 64:
            raise ValueError(f"SPYRE_DEVICE_COUNT must be in [1, 64], got {count}")
        return cls(
            device_count=count,
            memory_bytes=int(env.get("SPYRE_MEMORY_BYTES", str(DEFAULT_MEMORY_BYTES))),
            op_policy=policy,
            silence_downcast_warning=_truthy(env.get("SPYRE_SILENCE_DOWNCAST_WARNING")),
            extensions_dir=Path(env["SPYRE_EXTENSIONS_DIR"])
            if env.get("SPYRE_EXTENSIONS_DIR")
            else default_extensions_dir(),
            backends_entry_point=_truthy(env.get("SPYRE_BACKENDS_ENTRY_POINT")),
            device_model=model,
        )


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


def default_extensions_dir() -> Path:
    """``<repo>/var/torch_extensions`` in a writable checkout (``var/`` is git-ignored and is
    created on demand, so a fresh clone builds once), else the user cache."""
    root = Path(__file__).resolve().parent.parent
    if (root / "pyproject.toml").is_file() and os.access(root, os.W_OK):
        return root / "var" / "torch_extensions"
    return Path.home() / ".cache" / "spyre_stack" / "torch_extensions"
