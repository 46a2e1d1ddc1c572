"""A seeded sampler of source mutants over functions of a fixed list of upstream files.

The files are fixed before any signal is looked at (:data:`FILES`); a mutant changes one site
inside one function by one of the usual operators (:data:`OPERATORS`): a comparison or an
arithmetic operator swapped, an integer constant off by one, a condition negated, the first two
arguments of a call swapped, a returned value changed to ``None``. The edit is textual (only the
site's characters change, so a diff shows one function changed) and checked: the mutated file
parses and its AST differs. Each mutant has a clean twin: the same file with one comment line
added above the function, which changes no AST.

:func:`sample_mutants` is deterministic for a seed and a tree: functions are enumerated in a
sorted order, the seeded generator picks functions (one mutant per function), an operator among
those with a site in it, and a site.
"""

from __future__ import annotations

import ast
import io
import random
import tokenize
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

FILES = (
    "torch/_refs/__init__.py",
    "torch/_decomp/decompositions.py",
    "torch/_prims_common/__init__.py",
    "torch/nn/functional.py",
    "torch/functional.py",
    "torch/_tensor.py",
    "torch/nn/modules/*.py",
    "torch/testing/_internal/opinfo/definitions/*.py",
)
OPERATORS = ("compare", "arith", "constant", "negate", "swap-args", "return")

_COMPARE = {ast.Lt: "<=", ast.LtE: "<", ast.Gt: ">=", ast.GtE: ">", ast.Eq: "!=", ast.NotEq: "=="}
_COMPARE_TEXT = {
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
}
_ARITH = {
    ast.Add: ("+", "-"),
    ast.Sub: ("-", "+"),
    ast.Mult: ("*", "/"),
    ast.Div: ("/", "*"),
    ast.FloorDiv: ("//", "*"),
    ast.Mod: ("%", "//"),
    ast.Pow: ("**", "*"),
}


@dataclass(frozen=True)
class Mutant:
    """One fault: the file's mutated text and its clean twin's text."""

    id: str  # e.g. ``m007``: its rank in the sample
    path: str  # repository-relative, ``torch/...``
    function: str  # qualified name of the function it changes
    operator: str  # one of OPERATORS
    line: int  # of the site
    description: str  # what changed, e.g. ``< -> <=``
    source: str  # the mutated file
    twin: str  # the clean twin: the original file plus one comment line

    @property
    def symbol(self) -> str:
        return f"{self.path}::{self.function}"


@dataclass(frozen=True)
class _Edit:
    start: int  # character offsets into the file's text
    end: int
    text: str
    description: str


def expand(root: Path, patterns: Sequence[str] = FILES) -> list[str]:
    """The files of ``patterns`` under ``root`` (a folder holding ``torch/``), sorted."""
    out: set[str] = set()
    for pattern in patterns:
        out |= {p.relative_to(root).as_posix() for p in root.glob(pattern) if p.is_file()}
    return sorted(out)


def functions(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Qualified name and node of every function and method (nested ones are part of theirs)."""

    def visit(
        body: list[ast.stmt], prefix: str
    ) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                yield prefix + node.name, node
            elif isinstance(node, ast.ClassDef):
                yield from visit(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, ast.If | ast.Try):  # definitions under `if TYPE_CHECKING:` etc.
                for block in (
                    node.body,
                    node.orelse,
                    *(getattr(h, "body", []) for h in getattr(node, "handlers", [])),
                ):
                    yield from visit(block, prefix)

    yield from visit(tree.body, "")


class _Offsets:
    """ast positions (line, UTF-8 byte column) to character offsets into the text."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def at(self, line: int, col: int) -> int:
        raw = self.lines[line - 1].encode("utf-8")[:col]
        return self.starts[line - 1] + len(raw.decode("utf-8", "replace"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (
            self.at(node.lineno, node.col_offset),  # type: ignore[attr-defined]
            self.at(node.end_lineno, node.end_col_offset),  # type: ignore[attr-defined]
        )


def _gap_operator(text: str, start: int, end: int, symbol: str) -> tuple[int, int] | None:
    """Where the operator token ``symbol`` is in ``text[start:end]`` (between two operands)."""
    gap = text[start:end]
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(gap).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None
    found = [t for t in tokens if t.type == tokenize.OP and t.string == symbol]
    if len(found) != 1 or found[0].start[0] != 1:
        return None  # an operator across lines: left alone
    return start + found[0].start[1], start + found[0].end[1]


def _sites(text: str, fn: ast.AST, offsets: _Offsets) -> dict[str, list[_Edit]]:
    sites: dict[str, list[_Edit]] = {op: [] for op in OPERATORS}
    body = [n for stmt in fn.body for n in ast.walk(stmt)]  # type: ignore[attr-defined]
    for node in body:
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
            op = type(node.ops[0])
            where = _gap_operator(
                text,
                offsets.span(node.left)[1],
                offsets.span(node.comparators[0])[0],
                _COMPARE_TEXT[op],
            )
            if where:
                sites["compare"].append(
                    _Edit(*where, _COMPARE[op], f"{_COMPARE_TEXT[op]} -> {_COMPARE[op]}")
                )
        elif isinstance(node, ast.BinOp) and type(node.op) in _ARITH:
            old, new = _ARITH[type(node.op)]
            where = _gap_operator(
                text, offsets.span(node.left)[1], offsets.span(node.right)[0], old
            )
            if where:
                sites["arith"].append(_Edit(*where, new, f"{old} -> {new}"))
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            start, end = offsets.span(node)
            if text[start:end].isdigit():
                sites["constant"].append(
                    _Edit(start, end, str(node.value + 1), f"{node.value} -> {node.value + 1}")
                )
        elif isinstance(node, ast.If | ast.While | ast.IfExp):
            start, end = offsets.span(node.test)
            sites["negate"].append(
                _Edit(start, end, f"not ({text[start:end]})", "condition negated")
            )
        elif isinstance(node, ast.Call) and len(node.args) >= 2:
            first, second = node.args[0], node.args[1]
            if isinstance(first, ast.Starred) or isinstance(second, ast.Starred):
                continue
            (a0, a1), (b0, b1) = offsets.span(first), offsets.span(second)
            if text[a0:a1] != text[b0:b1]:
                swapped = text[b0:b1] + text[a1:b0] + text[a0:a1]
                sites["swap-args"].append(_Edit(a0, b1, swapped, "first two arguments swapped"))
        elif isinstance(node, ast.Return) and node.value is not None and not _is_none(node.value):
            start, end = offsets.span(node.value)
            sites["return"].append(_Edit(start, end, "None", "returns None"))
    return sites


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _twin(text: str, fn: ast.AST, offsets: _Offsets, mutant_id: str) -> str:
    """``text`` with a comment line above ``fn`` (above its decorators), same indentation."""
    first = min([fn.lineno, *(d.lineno for d in getattr(fn, "decorator_list", []))])  # type: ignore[attr-defined]
    line = offsets.lines[first - 1]
    indent = line[: len(line) - len(line.lstrip())]
    at = offsets.starts[first - 1]
    return text[:at] + f"{indent}# relay catch: clean twin of {mutant_id}\n" + text[at:]


def sample_mutants(
    root: Path,
    *,
    count: int,
    seed: int,
    files: Sequence[str] = FILES,
    operators: Sequence[str] = OPERATORS,
    read: Callable[[str], str] | None = None,
) -> list[Mutant]:
    """``count`` mutants (fewer when the files hold fewer mutable functions) of the files of
    ``files`` under ``root``, one per function, the same for the same seed and tree.
    ``read(path)`` gives a file's text (default: read it under ``root``)."""
    reader = read or (lambda path: (root / path).read_text(encoding="utf-8"))
    candidates: list[tuple[str, str]] = []
    texts: dict[str, str] = {}
    trees: dict[str, ast.Module] = {}
    for path in expand(root, files):
        try:
            texts[path] = reader(path)
            trees[path] = ast.parse(texts[path])
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        candidates += [(path, name) for name, _ in functions(trees[path])]
    candidates = sorted(dict.fromkeys(candidates))
    rng = random.Random(seed)
    rng.shuffle(candidates)
    files_of = {path: _File(texts[path], trees[path]) for path in trees}
    out: list[Mutant] = []
    for path, name in candidates:
        if len(out) >= count:
            break
        mutant = _mutate(path, name, files_of[path], rng, operators, f"m{len(out) + 1:03d}")
        if mutant is not None:
            out.append(mutant)
    return out


class _File:
    """One file's text, tree, offsets and AST dump, computed once for all its functions."""

    def __init__(self, text: str, tree: ast.Module) -> None:
        self.text = text
        self.functions = dict(functions(tree))
        self.offsets = _Offsets(text)
        self.dump = ast.dump(tree)


def _mutate(
    path: str,
    name: str,
    file: _File,
    rng: random.Random,
    operators: Sequence[str],
    mutant_id: str,
) -> Mutant | None:
    text, fn, offsets = file.text, file.functions[name], file.offsets
    sites = _sites(text, fn, offsets)
    usable = [op for op in operators if sites.get(op)]
    if not usable:
        return None
    operator = rng.choice(usable)
    edit = rng.choice(sites[operator])
    source = text[: edit.start] + edit.text + text[edit.end :]
    try:
        if ast.dump(ast.parse(source)) == file.dump:
            return None
    except SyntaxError:
        return None
    twin = _twin(text, fn, offsets, mutant_id)
    line = text.count("\n", 0, edit.start) + 1
    return Mutant(mutant_id, path, name, operator, line, edit.description, source, twin)
