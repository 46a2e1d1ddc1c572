"""The seeded mutant sampler (evaluation.mutants) on a small fake torch tree: the same seed gives
the same mutants, every operator makes the edit it names inside one function only, and a clean
twin changes no AST."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from evaluation.mutants import OPERATORS, expand, functions, sample_mutants

FUNCTIONAL = '''\
import math


def clamp_min(x, low):
    """Docstring."""
    if x < low:
        return low
    return x


def scale(x, factor):
    y = x * factor + 1
    return math.pow(y, 2)


class Module:
    @staticmethod
    def forward(a, b):
        return a if a >= b else b

    def weight(self):
        return self.values[0] - self.values[1]
'''
EXPECTED = {  # operator -> the text its edit must leave in the mutated function
    "compare": {"x <= low", "a > b"},
    "arith": {"x / factor", "- 1", "self.values[0] + self.values[1]"},
    "constant": {"+ 2", "math.pow(y, 3)", "values[1]", "values[2]"},
    "negate": {"if not (x < low)", "if not (a >= b)"},
    "swap-args": {"math.pow(2, y)"},
    "return": {"return None"},
}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "torch" / "nn" / "modules").mkdir(parents=True)
    (tmp_path / "torch" / "nn" / "functional.py").write_text(FUNCTIONAL)
    (tmp_path / "torch" / "nn" / "modules" / "linear.py").write_text(
        FUNCTIONAL.replace("scale", "shift")
    )
    (tmp_path / "torch" / "nn" / "modules" / "broken.py").write_text("def f(:\n")  # skipped
    (tmp_path / "torch" / "other.py").write_text(FUNCTIONAL)  # not in the fixed list
    return tmp_path


def _defs(text: str) -> dict[str, str]:
    return {name: ast.dump(node) for name, node in functions(ast.parse(text))}


def test_the_fixed_list_is_expanded_and_sorted(tree: Path) -> None:
    assert expand(tree) == [
        "torch/nn/functional.py",
        "torch/nn/modules/broken.py",
        "torch/nn/modules/linear.py",
    ]


def test_the_same_seed_gives_the_same_mutants(tree: Path) -> None:
    first = sample_mutants(tree, count=6, seed=3)
    assert first == sample_mutants(tree, count=6, seed=3)
    assert len(first) == 6 and [m.id for m in first] == [f"m00{i}" for i in range(1, 7)]
    assert len({m.symbol for m in first}) == 6  # one mutant per function
    assert {m.path for m in first} == {"torch/nn/functional.py", "torch/nn/modules/linear.py"}
    others = [sample_mutants(tree, count=6, seed=s) for s in range(4, 12)]
    assert any(o != first for o in others)
    assert len(sample_mutants(tree, count=100, seed=3)) == 8  # every function once at most


@pytest.mark.parametrize("operator", OPERATORS)
def test_each_operator_changes_one_function_and_the_twin_changes_no_ast(
    tree: Path, operator: str
) -> None:
    mutants = sample_mutants(tree, count=8, seed=1, operators=[operator])
    assert mutants, operator
    for m in mutants:
        original = (tree / m.path).read_text()
        assert m.operator == operator
        before, after = _defs(original), _defs(m.source)
        assert [n for n in before if before[n] != after[n]] == [m.function]
        changed = m.source.splitlines()[m.line - 1]
        assert any(text in changed for text in EXPECTED[operator]), (m.description, changed)
        assert ast.dump(ast.parse(m.twin)) == ast.dump(ast.parse(original))
        assert m.twin != original and f"clean twin of {m.id}" in m.twin
