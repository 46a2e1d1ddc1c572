"""Function- and class-level changes between two versions of a Python file, from the AST.

Each definition gets a digest of its normalized ``ast.dump`` (no line or column information),
so reformatting, comments and blank lines never count as changes. A definition's digest covers
its own code only: nested functions and classes are replaced by their names and reported on
their own, so a changed method shows up as ``Class.method`` and not also as ``Class``.
Statements outside any definition are summarized as the pseudo-symbol ``<module>``.
"""

from __future__ import annotations

import ast
import hashlib

MODULE_SYMBOL = "<module>"
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


class SymbolInfo:
    """One definition: its kind, a hash of its exact source text, and (lazily) its AST digest.

    Two symbols with the same text hash are equal without dumping their ASTs, which keeps
    large files cheap; only definitions whose text differs are compared structurally.
    """

    __slots__ = ("_digest", "keep_docstrings", "kind", "node", "qualname", "text_hash")

    def __init__(self, qualname: str, kind: str, node: ast.AST, text_hash: str,
                 keep_docstrings: bool = False) -> None:
        self.qualname = qualname
        self.kind = kind
        self.node = node
        self.text_hash = text_hash
        self.keep_docstrings = keep_docstrings
        self._digest: str | None = None

    @property
    def digest(self) -> str:
        if self._digest is None:
            self._digest = _digest(self.node, self.keep_docstrings)
        return self._digest

    def same_as(self, other: SymbolInfo) -> bool:
        return self.text_hash == other.text_hash or self.digest == other.digest

    def names(self) -> frozenset[str]:
        """Plain names the definition refers to (nested definitions included)."""
        return frozenset(n.id for n in ast.walk(self.node) if isinstance(n, ast.Name))

    def __repr__(self) -> str:
        return f"SymbolInfo({self.qualname!r}, {self.kind!r})"


def _is_docstring(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


def _dump(node: object, root: ast.AST, keep_docstrings: bool, out: list[str]) -> None:
    """Append a normalized dump of ``node`` to ``out``; nested definitions become markers."""
    if isinstance(node, ast.AST):
        if node is not root and isinstance(node, _DEFS):
            out.append(f"<def {node.name}>")
            return
        out.append(type(node).__name__)
        out.append("(")
        for name, value in ast.iter_fields(node):
            if (
                name == "body"
                and not keep_docstrings
                and isinstance(node, (*_DEFS, ast.Module))
                and isinstance(value, list)
                and value
                and _is_docstring(value[0])
            ):
                value = value[1:]
            out.append(name)
            out.append("=")
            _dump(value, root, keep_docstrings, out)
            out.append(",")
        out.append(")")
    elif isinstance(node, list):
        out.append("[")
        for item in node:
            _dump(item, root, keep_docstrings, out)
            out.append(",")
        out.append("]")
    else:
        out.append(repr(node))


def _digest(node: ast.AST, keep_docstrings: bool) -> str:
    parts: list[str] = []
    _dump(node, node, keep_docstrings, parts)
    return hashlib.blake2b("".join(parts).encode(), digest_size=12).hexdigest()


def _blocks(stmt: ast.stmt) -> list[list[ast.stmt]]:
    """The statement lists nested in a compound statement that is not a definition."""
    blocks = [getattr(stmt, f) for f in ("body", "orelse", "finalbody")
              if isinstance(getattr(stmt, f, None), list)]
    blocks += [h.body for h in getattr(stmt, "handlers", [])]
    blocks += [c.body for c in getattr(stmt, "cases", [])]
    return blocks


def _hash_lines(lines: list[str], first: int, last: int) -> str:
    text = "\n".join(lines[first - 1:last])
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def symbols_of(
    tree: ast.Module, source: bytes | str = b"", *, keep_docstrings: bool = False
) -> dict[str, SymbolInfo]:
    """qualified name -> SymbolInfo for every function and class, plus ``<module>``.

    ``source`` is the text the tree was parsed from (used for the cheap equality check); when
    it is empty every comparison falls back to the AST digest.
    """
    text = source.decode("utf-8", "replace") if isinstance(source, bytes) else source
    lines = text.splitlines()
    found: dict[str, SymbolInfo] = {}
    module_parts: list[str] = []

    def text_hash(node: ast.stmt) -> str:
        if not lines:
            return f"<no source {id(node)}>"
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        return _hash_lines(lines, first, node.end_lineno or node.lineno)

    def visit(body: list[ast.stmt], prefix: str, top: bool) -> None:
        for stmt in body:
            if isinstance(stmt, _DEFS):
                qualname = f"{prefix}{stmt.name}"
                kind = "class" if isinstance(stmt, ast.ClassDef) else "function"
                # A name defined twice (e.g. in both branches of an `if`) keeps the last one.
                found[qualname] = SymbolInfo(qualname, kind, stmt, text_hash(stmt),
                                             keep_docstrings)
                visit(stmt.body, f"{qualname}.", False)
            else:
                if top:
                    module_parts.append(text_hash(stmt))
                # definitions inside if / try / with blocks belong to the enclosing scope
                for block in _blocks(stmt):
                    visit(block, prefix, False)

    visit(tree.body, "", True)
    module_hash = hashlib.blake2b("|".join(module_parts).encode(), digest_size=12).hexdigest()
    # top-level code without the definitions: adding or moving a function is not a change here
    top = ast.Module(body=[s for s in tree.body if not isinstance(s, _DEFS)], type_ignores=[])
    found[MODULE_SYMBOL] = SymbolInfo(MODULE_SYMBOL, "module", top,
                                      module_hash if lines else "<no source>", keep_docstrings)
    return found


def parse(source: bytes, path: str = "<unknown>") -> ast.Module:
    """Parse Python source; raises SyntaxError (or ValueError for NUL bytes)."""
    return ast.parse(source, filename=path)


def diff_symbols(
    old: dict[str, SymbolInfo], new: dict[str, SymbolInfo]
) -> list[tuple[str, str, str]]:
    """(qualname, kind, status) for symbols added, removed or modified, sorted by name."""
    out = []
    for name in sorted(old.keys() | new.keys()):
        a, b = old.get(name), new.get(name)
        if a is None and b is not None:
            out.append((name, b.kind, "added"))
        elif b is None and a is not None:
            out.append((name, a.kind, "removed"))
        elif a is not None and b is not None and not a.same_as(b):
            out.append((name, b.kind, "modified"))
    return out


def file_symbol_changes(
    path: str, old: bytes | None, new: bytes | None
) -> tuple[list[tuple[str, str, str]], str | None]:
    """Symbol changes of one file between two versions (``None`` = absent on that side).

    Returns the changes and, when a side does not parse, the error (with no changes: the
    caller treats such a file as changed as a whole). Pure, so it can run in a worker process.
    """
    sides: list[dict[str, SymbolInfo]] = []
    for label, data in (("base", old), ("head", new)):
        if data is None:
            sides.append({})
            continue
        try:
            sides.append(symbols_of(parse(data, path), data))
        except (SyntaxError, ValueError) as exc:
            return [], f"{label}: {type(exc).__name__}: {exc}"
    return diff_symbols(sides[0], sides[1]), None


def file_symbol_changes_star(
    args: tuple[str, bytes | None, bytes | None],
) -> tuple[list[tuple[str, str, str]], str | None]:
    return file_symbol_changes(*args)
