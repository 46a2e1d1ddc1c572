"""Entries of native_functions.yaml and derivatives.yaml, keyed by operator overload name.

An entry's key is the schema's name up to the argument list: ``add.Tensor`` for
``func: add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor`` (native functions)
or ``name: add.Tensor(...)`` (derivatives). Entries are compared as parsed YAML, so layout,
quoting and comments never count; a changed entry lists the fields that differ.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class YamlEntryDiff:
    name: str  # overload name, e.g. "add.Tensor" or "add" for the default overload
    op: str  # base operator name, e.g. "add" (trailing "_" of in-place variants kept)
    status: str  # "added" | "removed" | "modified"
    fields: tuple[str, ...] = ()
    dispatch_keys: tuple[str, ...] = ()  # dispatch keys whose kernel changed (native functions)


def overload_name(schema: str) -> str:
    return schema.split("(", 1)[0].strip()


def base_op(name: str) -> str:
    return name.split(".", 1)[0]


def load_entries(text: bytes | str | None, key_field: str) -> dict[str, dict[str, Any]]:
    """name -> entry for every mapping with ``key_field`` (``func`` or ``name``).

    Raises ValueError when the text is not a YAML list of mappings.
    """
    if not text:
        return {}
    try:
        data = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        raise ValueError(f"not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, list):
        raise ValueError("expected a YAML list of entries")
    entries: dict[str, dict[str, Any]] = {}
    for item in data:
        if isinstance(item, dict) and isinstance(item.get(key_field), str):
            entries[overload_name(item[key_field])] = item
    return entries


def diff_entries(old: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]]) -> list[YamlEntryDiff]:
    out = []
    for name in sorted(old.keys() | new.keys()):
        a, b = old.get(name), new.get(name)
        if a is None:
            out.append(YamlEntryDiff(name, base_op(name), "added"))
        elif b is None:
            out.append(YamlEntryDiff(name, base_op(name), "removed"))
        elif a != b:
            fields = tuple(sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k)))
            keys = _changed_dispatch_keys(a.get("dispatch"), b.get("dispatch"))
            out.append(YamlEntryDiff(name, base_op(name), "modified", fields, keys))
    return out


def _dispatch_table(value: Any) -> dict[str, str]:
    """{"CPU, CUDA": "k"} -> {"CPU": "k", "CUDA": "k"}; anything else -> {}."""
    table: dict[str, str] = {}
    if isinstance(value, dict):
        for keys, kernel in value.items():
            for key in str(keys).split(","):
                table[key.strip()] = str(kernel)
    return table


def _changed_dispatch_keys(old: Any, new: Any) -> tuple[str, ...]:
    a, b = _dispatch_table(old), _dispatch_table(new)
    return tuple(sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k)))
