"""The spec grammar's words: its version, the modes, dtype names, path tokens and test names a
spec may use, the base every node of the grammar derives from, and the small items (names,
dtypes, precisions) its parts share. torch-spyre's ``test_suite_config`` keys and ours; the
parts are :mod:`testspecs.input_specs` (recorded inputs), :mod:`testspecs.edits` (what an entry
changes) and :mod:`testspecs.models` (entries, files, the suite: the document)."""

from __future__ import annotations

import difflib
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, PrivateAttr, field_validator

from testspecs.errors import SourceLoc
from testspecs.names import parse_name

# Version of our grammar superset. Bump with a line in CHANGELOG below.
GRAMMAR_VERSION = 1
EXTENSION_KEY = f"x-relay/v{GRAMMAR_VERSION}"
# CHANGELOG
# v1: test entries may carry reason / owner / expires; files and the suite may carry owner.
# v1 (additive): torch-spyre keys it ignores load: ops include items' own kwargs, a root cases list.
# v1 (additive): test entries may carry ops / modules / dtypes (the entry decides only those
#   variants: rule 4 skips it for others) and promoted (written by `relay specs promote`).
# v1 (additive): keys of torch-spyre's newer grammar load: a tensor's device_layout (device_size,
#   stride_map, device_dtype), init_args.total, config / module / cache input args, test entries'
#   labels and no_grad, files' labels, module items' apply_device_layout.

MODES = ("mandatory_success", "xfail", "xfail_strict", "skip")
Mode = Literal["mandatory_success", "xfail", "xfail_strict", "skip"]

DTYPE_NAMES = (
    "float16",
    "float32",
    "float64",
    "bfloat16",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "complex32",
    "complex64",
    "complex128",
    "bool",
    "half",
)
PATH_TOKENS = ("${TORCH_ROOT}", "${TORCH_DEVICE_ROOT}")
_TOKEN_RE = re.compile(r"\$\{[^}]*\}?")


def did_you_mean(word: str, choices: tuple[str, ...] | list[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _check_dtype(value: str) -> str:
    bare = value.removeprefix("torch.")
    if bare not in DTYPE_NAMES:
        raise ValueError(f"unknown dtype {value!r}{did_you_mean(bare, DTYPE_NAMES)}")
    return bare


def _check_tensor_dtype(value: str) -> str:
    _check_dtype(value)
    return value


def _check_name(value: str) -> str:
    parse_name(value)  # raises ValueError with a readable message
    return value


def _check_path(value: str) -> str:
    if not value.strip():
        raise ValueError("path must not be empty")
    for token in _TOKEN_RE.findall(value):
        if token not in PATH_TOKENS:
            raise ValueError(f"unknown path token {token!r}{did_you_mean(token, PATH_TOKENS)}")
    return value


DtypeName = Annotated[str, AfterValidator(_check_dtype)]
TestName = Annotated[str, AfterValidator(_check_name)]
TensorDtype = Annotated[str, AfterValidator(_check_tensor_dtype)]
#: a path in a spec: ``${TORCH_ROOT}`` or ``${TORCH_DEVICE_ROOT}`` and a relative path
SpecPath = Annotated[str, AfterValidator(_check_path)]


class SpecModel(BaseModel):
    """Base: unknown keys are errors; every node remembers where it was defined."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=False)
    _loc: SourceLoc | None = PrivateAttr(default=None)

    @property
    def loc(self) -> SourceLoc | None:
        return self._loc


def _names_from_strings(value: Any) -> Any:
    """torch-spyre lets list items be a bare name instead of ``{name: ...}``."""
    if isinstance(value, list):
        return [{"name": v} if isinstance(v, str) else v for v in value]
    return value


def bare_names(*fields: str) -> Any:
    def convert(cls: type, value: Any) -> Any:
        return _names_from_strings(value)

    return field_validator(*fields, mode="before")(convert)


class Precision(SpecModel):
    atol: float | None = None
    rtol: float | None = None


class NamedItem(SpecModel):
    name: str
    description: str | None = None


class DtypeItem(SpecModel):
    name: DtypeName
    description: str | None = None


class DtypeNamedItem(SpecModel):
    name: DtypeName
    description: str | None = None
    precision: Precision | None = None
    force_xfail: bool = False
