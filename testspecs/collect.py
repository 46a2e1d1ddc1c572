"""Which device-generic tests a test file defines.

Two readers, one shape per answer:

* :func:`collect_file` reads the source without importing it: a ``test*`` method of a class
  passed to ``instantiate_device_type_tests`` (including methods inherited from classes of the
  same file), with the ``only_for`` the call restricts it to. It is fast and needs no torch, but
  it cannot see tests a module generates at import time (``setattr`` from a module-level
  function, as upstream's test_binary_ufuncs.py does).
* A :data:`Collector` is what pytest knows: the variants a collection run of the file generated
  for the device under test (:class:`CollectedVariant`, with the generic class, the base name,
  op, dtype and module). This package does not start pytest itself: the caller (``relay specs
  lint``) passes a collector that runs the backend's own collection in a subprocess, as the
  inventory does.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CollectedTest:
    cls: str
    method: str
    line: int
    only_for: tuple[str, ...] | None  # the only_for argument, when given as literals

    @property
    def name(self) -> str:
        return f"{self.cls}::{self.method}"


@dataclass(frozen=True)
class CollectedVariant:
    """One variant a pytest collection generated for the device under test."""

    test_id: str
    cls: str | None  # the generic class (``TestBinaryUfuncs``), not ``...PRIVATEUSE1``
    method: str  # the base name: the template the variant was generated from
    op: str | None = None
    dtype: str | None = None
    module: str | None = None

    @property
    def name(self) -> str:
        return f"{self.cls}::{self.method}" if self.cls else self.method


class CollectionError(Exception):
    """A test file that pytest could not collect (the message says why)."""


#: path of a test file -> the variants pytest collects from it (raises CollectionError)
Collector = Callable[[Path], list[CollectedVariant]]


def generic_class(cls: str | None, device_suffixes: tuple[str, ...]) -> str | None:
    """``TestFooPRIVATEUSE1`` -> ``TestFoo`` (the name a spec lists)."""
    if cls is None:
        return None
    for suffix in device_suffixes:
        if cls.endswith(suffix) and len(cls) > len(suffix):
            return cls[: -len(suffix)]
    return cls


def _literal_strings(node: ast.AST | None) -> tuple[str, ...] | None:
    if node is None:
        return None
    try:
        value = ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return None
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list | tuple | set) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return None


def collect_source(source: str, filename: str = "<source>") -> list[CollectedTest]:
    tree = ast.parse(source, filename)
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    instantiated: dict[str, tuple[str, ...] | None] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        fname = (
            func.id
            if isinstance(func, ast.Name)
            else func.attr
            if isinstance(func, ast.Attribute)
            else ""
        )
        if fname != "instantiate_device_type_tests" or not node.args:
            continue
        target = node.args[0]
        if isinstance(target, ast.Name):
            kw = {k.arg: k.value for k in node.keywords}
            instantiated[target.id] = _literal_strings(kw.get("only_for"))
    out: list[CollectedTest] = []
    for cls_name, only_for in instantiated.items():
        cls = classes.get(cls_name)
        if cls is None:
            continue
        seen: set[str] = set()
        for c in _mro(cls, classes):
            for item in c.body:
                if not isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                if item.name.startswith("test") and item.name not in seen:
                    seen.add(item.name)
                    out.append(CollectedTest(cls_name, item.name, item.lineno, only_for))
    return out


def _mro(cls: ast.ClassDef, classes: dict[str, ast.ClassDef]) -> list[ast.ClassDef]:
    order = [cls]
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id in classes and classes[base.id] is not cls:
            order += [c for c in _mro(classes[base.id], classes) if c not in order]
    return order


def collect_file(path: str | Path) -> list[CollectedTest]:
    p = Path(path)
    return collect_source(p.read_text(encoding="utf-8"), str(p))
