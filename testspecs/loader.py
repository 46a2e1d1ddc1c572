"""Line-aware spec loader built on PyYAML's node API.

The YAML text is composed into nodes (whose marks give line and column), converted to plain data
while recording where every key and value came from, then validated by the pydantic models. Every
problem is reported with ``file:line:column: key.path: message`` and all of a file's problems are
raised together as one :class:`SpecError`; the loader never raises anything else.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from testspecs.errors import SourceLoc, SpecError, SpecIssue
from testspecs.models import SpecDocument
from testspecs.vocabulary import PATH_TOKENS, did_you_mean

_MAX_DEPTH = 64
_COMPOSER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
#: the fewest nodes a document may expand to before it counts as an alias bomb; a document
#: without repeated aliases has fewer nodes than characters, so the budget is the larger of this
#: and the text's length (torch-spyre's largest model op files: 1.5 M characters, ~60,000 nodes)
_MAX_NODES = 200_000
_STR_TAG = "tag:yaml.org,2002:str"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_MAP_TAGS = {"tag:yaml.org,2002:map"}
_SEQ_TAGS = {"tag:yaml.org,2002:seq"}

Path_ = tuple[str | int, ...]


@dataclass
class LoadedSpec:
    """A validated spec file."""

    document: SpecDocument
    file: str
    warnings: list[SpecIssue] = field(default_factory=list)
    # where every value was written, by key path (used to edit the text, e.g. `specs update`)
    value_locs: dict[Path_, SourceLoc] = field(default_factory=dict, repr=False)


class _Marks:
    def __init__(self, file: str) -> None:
        self.file = file
        self.keys: dict[Path_, SourceLoc] = {}
        self.values: dict[Path_, SourceLoc] = {}

    def loc(self, mark: yaml.Mark | None) -> SourceLoc:
        if mark is None:
            return SourceLoc(self.file, 1, 1)
        return SourceLoc(self.file, mark.line + 1, mark.column + 1)


class _Converter:
    def __init__(self, marks: _Marks, max_nodes: int = _MAX_NODES) -> None:
        self.marks = marks
        self.issues: list[SpecIssue] = []
        self.count = 0
        self.max_nodes = max_nodes
        self.constructor = yaml.SafeLoader("")

    def issue(self, mark: yaml.Mark | None, path: Path_, message: str) -> None:
        self.issues.append(SpecIssue(self.marks.loc(mark), path, message))

    def convert(self, node: Node, path: Path_, depth: int = 0) -> Any:
        self.count += 1
        if depth > _MAX_DEPTH:
            raise _TooBig(node, path, f"document nested deeper than {_MAX_DEPTH} levels")
        if self.count > self.max_nodes:
            raise _TooBig(
                node,
                path,
                f"document expands to more than {self.max_nodes:,} values, more than its "
                "characters: an alias repeated over and over (recursive alias?)",
            )
        self.marks.values.setdefault(path, self.marks.loc(node.start_mark))
        if isinstance(node, MappingNode):
            if node.tag not in _MAP_TAGS:
                self.issue(node.start_mark, path, f"unsupported YAML tag {node.tag!r}")
                return None
            return self._mapping(node, path, depth)
        if isinstance(node, SequenceNode):
            if node.tag not in _SEQ_TAGS:
                self.issue(node.start_mark, path, f"unsupported YAML tag {node.tag!r}")
                return None
            return [self.convert(v, (*path, i), depth + 1) for i, v in enumerate(node.value)]
        assert isinstance(node, ScalarNode)
        try:
            return self.constructor.construct_object(node, deep=True)
        except Exception as e:  # any constructor failure is a spec problem at this node
            problem = getattr(e, "problem", None) or str(e) or e.__class__.__name__
            self.issue(node.start_mark, path, f"invalid scalar: {problem}")
            return None

    def _mapping(self, node: MappingNode, path: Path_, depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        first: dict[str, yaml.Mark] = {}
        pairs: list[tuple[Node, Node]] = []
        for knode, vnode in node.value:
            if knode.tag == _MERGE_TAG:
                pairs.extend(self._merge_pairs(vnode, path))
            else:
                pairs.append((knode, vnode))
        for knode, vnode in pairs:
            if not isinstance(knode, ScalarNode) or knode.tag != _STR_TAG:
                if isinstance(knode, ScalarNode):
                    msg = f"key {knode.value!r} must be a string"
                else:
                    kind = "sequence" if isinstance(knode, SequenceNode) else "mapping"
                    msg = f"a {kind} cannot be a key; keys must be strings"
                self.issue(knode.start_mark, path, msg)
                continue
            key = knode.value
            if key in first:
                line = first[key].line + 1
                self.issue(
                    knode.start_mark,
                    (*path, key),
                    f"duplicate key {key!r} (first defined at line {line})",
                )
                continue
            first[key] = knode.start_mark
            self.marks.keys[(*path, key)] = self.marks.loc(knode.start_mark)
            out[key] = self.convert(vnode, (*path, key), depth + 1)
        return out

    def _merge_pairs(self, vnode: Node, path: Path_) -> list[tuple[Node, Node]]:
        sources = vnode.value if isinstance(vnode, SequenceNode) else [vnode]
        pairs: list[tuple[Node, Node]] = []
        for src in sources:
            if not isinstance(src, MappingNode):
                self.issue(
                    vnode.start_mark, path, "a merge key '<<' needs a mapping or a list of mappings"
                )
                return []
            pairs.extend(p for p in src.value if p[0].tag != _MERGE_TAG)
        return pairs


class _TooBig(Exception):
    def __init__(self, node: Node, path: Path_, reason: str) -> None:
        self.node = node
        self.path = path
        self.reason = reason


def _compose(text: str, marks: _Marks) -> tuple[Node | None, list[SpecIssue]]:
    try:
        return yaml.compose(text, Loader=_COMPOSER), []
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        msg = " ".join(p for p in (e.context, e.problem) if p) or "invalid YAML"
        return None, [SpecIssue(marks.loc(mark), (), f"YAML syntax error: {msg}")]
    except yaml.YAMLError as e:
        return None, [SpecIssue(marks.loc(None), (), f"YAML error: {e}")]
    except (RecursionError, MemoryError, ValueError) as e:
        return None, [SpecIssue(marks.loc(None), (), f"YAML error: {e.__class__.__name__}")]


# ---- mapping pydantic errors back to the source ------------------------------------------


def _unwrap(annotation: Any) -> list[Any]:
    """The model classes / list element types an annotation can hold."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [t for a in typing.get_args(annotation) for t in _unwrap(a)]
    return [annotation]


def _model_at(data_path: Path_) -> type[BaseModel] | None:
    """The model class describing the mapping at ``data_path`` (for "did you mean")."""
    candidates: list[Any] = [SpecDocument]
    for seg in data_path:
        nxt: list[Any] = []
        for c in candidates:
            if isinstance(seg, int):
                if typing.get_origin(c) is list:
                    nxt.extend(_unwrap(typing.get_args(c)[0]))
            elif isinstance(c, type) and issubclass(c, BaseModel):
                for name, f in c.model_fields.items():
                    if seg in (name, f.alias):
                        nxt.extend(_unwrap(f.annotation))
        candidates = nxt
    for c in candidates:
        if isinstance(c, type) and issubclass(c, BaseModel):
            return c
    return None


def _keys_of(model: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in model.model_fields.items()]


def _data_path(data: Any, loc: tuple[Any, ...]) -> tuple[Path_, bool]:
    """Follow ``loc`` through ``data``, dropping pydantic's union-member segments.

    Returns the path that exists in the data and whether the whole loc was found.
    """
    path: list[str | int] = []
    cur = data
    for i, seg in enumerate(loc):
        in_dict = isinstance(cur, dict) and isinstance(seg, str) and seg in cur
        in_list = isinstance(cur, list) and isinstance(seg, int) and 0 <= seg < len(cur)
        if in_dict or in_list:
            path.append(seg)
            cur = cur[seg]
        elif isinstance(seg, str) and i == len(loc) - 1:
            return tuple(path), False
        # otherwise a union tag such as 'list[Inputs]': not part of the data
    return tuple(path), True


_TYPE_WORDS = {
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "list_type": "a list",
    "string_type": "a string",
}


def _yaml_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"a number ({value!r})"
    if isinstance(value, str):
        return f"a string ({value!r})"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _issue_from_error(err: Any, data: Any, marks: _Marks) -> SpecIssue:
    loc = tuple(err["loc"])
    kind = err["type"]
    path, found = _data_path(data, loc)
    msg = str(err["msg"]).removeprefix("Value error, ")
    if kind == "missing" and not found:
        key = loc[-1]
        where = marks.values.get(path) or marks.loc(None)
        return SpecIssue(where, (*path, key), f"missing required key {key!r}")
    if kind == "extra_forbidden":
        key = str(path[-1]) if path else str(loc[-1])
        model = _model_at(path[:-1])
        hint = did_you_mean(key, _keys_of(model)) if model else ""
        where = marks.keys.get(path) or marks.values.get(path) or marks.loc(None)
        return SpecIssue(where, path, f"unknown key {key!r}{hint}")
    where = marks.values.get(path) or marks.loc(None)
    if kind in _TYPE_WORDS:
        msg = f"expected {_TYPE_WORDS[kind]}, got {_yaml_type(err.get('input'))}"
    if kind == "literal_error":
        expected = err.get("ctx", {}).get("expected", "")
        value = err.get("input")
        choices = [c.strip().strip("'") for c in expected.replace(" or ", ", ").split(",")]
        hint = did_you_mean(str(value), choices) if isinstance(value, str) else ""
        msg = f"invalid value {value!r}; expected {expected}{hint}"
    return SpecIssue(where, path, msg)


def _attach_locs(obj: Any, path: Path_, marks: _Marks) -> None:
    if isinstance(obj, BaseModel):
        obj._loc = marks.values.get(path)  # type: ignore[attr-defined]
        fields = type(obj).model_fields
        for name in obj.model_fields_set:  # defaults were written nowhere
            f = fields[name]
            key = f.alias or name
            value = getattr(obj, name)
            if isinstance(value, BaseModel | list):
                _attach_locs(value, (*path, key), marks)
    elif isinstance(obj, list):
        for i, item in enumerate(obj):
            if isinstance(item, BaseModel | list):
                _attach_locs(item, (*path, i), marks)


def _warnings(doc: SpecDocument, marks: _Marks) -> list[SpecIssue]:
    out = []
    for i, f in enumerate(doc.files):
        if not any(t in f.path for t in PATH_TOKENS) and not Path(f.path).is_absolute():
            path = ("test_suite_config", "files", i, "path")
            out.append(
                SpecIssue(
                    marks.values.get(path) or marks.loc(None),
                    path,
                    f"path {f.path!r} has no ${{TORCH_ROOT}}/${{TORCH_DEVICE_ROOT}} token and is "
                    "not absolute; it is resolved against the tests root",
                    severity="warning",
                )
            )
    return out


# ---- public API ---------------------------------------------------------------------------


def load_text(text: str, file: str = "<string>") -> LoadedSpec:
    """Parse and validate one spec document; raise :class:`SpecError` with every problem."""
    marks = _Marks(file)
    if not isinstance(text, str):
        raise SpecError([SpecIssue(marks.loc(None), (), "spec text must be a string")])
    node, issues = _compose(text, marks)
    if issues:
        raise SpecError(issues)
    if node is None:
        raise SpecError(
            [SpecIssue(marks.loc(None), (), "empty spec: expected 'test_suite_config'")]
        )
    conv = _Converter(marks, max_nodes=max(_MAX_NODES, len(text)))
    try:
        data = conv.convert(node, ())
    except _TooBig as e:
        raise SpecError(
            [
                SpecIssue(
                    marks.loc(e.node.start_mark),
                    e.path[:4],
                    e.reason,
                )
            ]
        ) from None
    except RecursionError:
        raise SpecError([SpecIssue(marks.loc(None), (), "document too deep")]) from None
    issues = list(conv.issues)
    try:
        doc = SpecDocument.model_validate(data)
    except ValidationError as e:
        issues += [_issue_from_error(err, data, marks) for err in e.errors()]
        raise SpecError(_dedupe(issues)) from None
    if issues:
        raise SpecError(_dedupe(issues))
    _attach_locs(doc, (), marks)
    return LoadedSpec(doc, file, _warnings(doc, marks), marks.values)


def _dedupe(issues: list[SpecIssue]) -> list[SpecIssue]:
    seen: set[tuple[Any, ...]] = set()
    out = []
    for i in issues:
        key = (i.loc, i.path, i.message)
        if key not in seen:
            seen.add(key)
            out.append(i)
    return out


def load_file(path: str | Path) -> LoadedSpec:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(
            [SpecIssue(SourceLoc(str(p), 1, 1), (), f"cannot read spec: {e}")]
        ) from None
    return load_text(text, str(p))


def spec_files(paths: Iterable[str | Path]) -> list[Path]:
    """Expand folders into their ``*.yaml`` / ``*.yml`` files (sorted, recursive)."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            out += sorted(q for q in p.rglob("*") if q.suffix in (".yaml", ".yml") and q.is_file())
        else:
            out.append(p)
    return out


def load_files(paths: Iterable[str | Path]) -> list[LoadedSpec]:
    """Load every file; raise one :class:`SpecError` carrying the problems of all of them."""
    loaded: list[LoadedSpec] = []
    issues: list[SpecIssue] = []
    for p in spec_files(paths):
        try:
            loaded.append(load_file(p))
        except SpecError as e:
            issues += e.issues
    if issues:
        raise SpecError(issues)
    return loaded
