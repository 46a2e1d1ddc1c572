"""Test names in specs and variant ids of instantiated tests.

A spec name is ``Class::method`` or ``method``. Each part is one of:

* a literal (no metacharacters),
* a glob when its only metacharacters are ``*`` and ``?`` (torch-spyre writes
  ``*TestModule*::test_forward``),
* otherwise a regular expression, matched with ``fullmatch`` on the base name.

A variant id is what instantiation produces: ``[file.py::]TestFooPRIVATEUSE1::test_add_spyre_float16``.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

REGEX_META = frozenset(".^$*+?{}[]|()\\")
GLOB_META = frozenset("*?")

# The reference's dtype names; the variant suffix uses these spellings.
DTYPE_TOKENS = (
    "complex128",
    "complex64",
    "complex32",
    "bfloat16",
    "float16",
    "float32",
    "float64",
    "uint16",
    "uint32",
    "uint64",
    "int16",
    "int32",
    "int64",
    "uint8",
    "int8",
    "bool",
    "half",
)
_DTYPE_RE = re.compile(r"_(" + "|".join(DTYPE_TOKENS) + r")(?=_|$)")


@dataclass(frozen=True)
class Matcher:
    kind: str  # "literal" | "glob" | "regex"
    text: str
    regex: re.Pattern[str] | None = None

    def matches(self, value: str) -> bool:
        if self.kind == "literal":
            return value == self.text
        assert self.regex is not None
        return self.regex.fullmatch(value) is not None


def make_matcher(text: str) -> Matcher:
    meta = set(text) & REGEX_META
    if not meta:
        return Matcher("literal", text)
    if meta <= GLOB_META:
        return Matcher("glob", text, re.compile(fnmatch.translate(text)))
    try:
        return Matcher("regex", text, re.compile(text))
    except re.error as e:
        raise ValueError(f"invalid regex {text!r}: {e}") from None
    except (RecursionError, OverflowError) as e:  # pathological patterns
        raise ValueError(f"invalid regex {text!r}: {e.__class__.__name__}") from None


@dataclass(frozen=True)
class NamePattern:
    """A parsed spec name."""

    text: str
    cls: Matcher | None
    method: Matcher

    @property
    def is_literal(self) -> bool:
        return self.method.kind == "literal"

    def matches(self, class_name: str | None, method: str) -> bool:
        if not self.method.matches(method):
            return False
        if self.cls is None:
            return True
        return class_name is not None and self.cls.matches(class_name)


def parse_name(name: str) -> NamePattern:
    if not isinstance(name, str) or not name.strip():
        raise ValueError("test name must not be empty")
    parts = name.split("::")
    if len(parts) > 2 or not all(parts):
        raise ValueError(f"invalid test name {name!r}: expected 'Class::method' or 'method'")
    if len(parts) == 1:
        return NamePattern(name, None, make_matcher(parts[0]))
    return NamePattern(name, make_matcher(parts[0]), make_matcher(parts[1]))


def variant_dtype(method: str) -> str | None:
    """Rule 3: the dtype token at the end of a variant name, else the longest one inside it."""
    found = list(_DTYPE_RE.finditer(method))
    if not found:
        return None
    last = found[-1]
    if last.end() == len(method):
        return last.group(1)
    return max(found, key=lambda m: len(m.group(1))).group(1)


@dataclass(frozen=True)
class VariantId:
    """The parts of an instantiated test id."""

    file: str | None
    cls: str | None  # instantiated class, e.g. TestFooPRIVATEUSE1
    base_cls: str | None  # generic class, e.g. TestFoo
    method: str  # instantiated method, e.g. test_add_spyre_float16
    prefix: str  # method part before the device token: base name (+ op)
    dtype: str | None

    @property
    def test_id(self) -> str:
        parts = [p for p in (self.file, self.cls) if p] + [self.method]
        return "::".join(parts)


def parse_variant(variant: str, device: str = "spyre") -> VariantId:
    parts = variant.split("::")
    file = None
    if len(parts) >= 3 or (len(parts) == 2 and parts[0].endswith(".py")):
        file = parts[0]
        parts = parts[1:]
    cls = parts[0] if len(parts) == 2 else None
    method = parts[-1]
    base_cls = cls
    if cls:
        for suffix in ("PRIVATEUSE1", device.upper()):
            if cls.endswith(suffix) and len(cls) > len(suffix):
                base_cls = cls[: -len(suffix)]
                break
    prefix = method
    tail = ""
    token = "_" + device
    idx = method.rfind(token)
    while idx >= 0:
        end = idx + len(token)
        if end == len(method) or method[end] == "_":
            prefix, tail = method[:idx], method[end:]
            break
        idx = method.rfind(token, 0, idx)
    dtype = variant_dtype(tail) if tail else variant_dtype(method) if prefix == method else None
    return VariantId(file, cls, base_cls, method, prefix, dtype)
