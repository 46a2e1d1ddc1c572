"""Pydantic models of the spec grammar: torch-spyre's ``test_suite_config`` plus our extension.

Every torch-spyre key is modelled (including the input-description keys its model-ops files use)
so that a torch-spyre file validates unchanged while an unknown key is still an error. Our own keys
live under ``EXTENSION_KEY`` (a key whose name carries the extension's version), which torch-spyre's
loader ignores.
"""

from __future__ import annotations

import datetime as dt
import difflib
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from testspecs.errors import SourceLoc
from testspecs.names import NamePattern, parse_name

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


def _bare_names(*fields: str) -> Any:
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


# ---- input descriptions (torch-spyre model-ops files) -------------------------------------


class InitArgs(SpecModel):
    low: int = 0
    high: int | None = None
    total: int | None = None  # init: cumsum_offsets
    fill_value: float | None = None
    path: str | None = None
    key: str | None = None


TensorDtype = Annotated[str, AfterValidator(_check_tensor_dtype)]


class DeviceLayout(SpecModel):
    """The layout a recorded tensor had on the device (torch-spyre's ``device_layout``): its
    device size and the stride map from host dimensions (-1: a dimension the device adds)."""

    device_size: list[int]
    stride_map: list[int]
    device_dtype: TensorDtype

    @model_validator(mode="after")
    def _same_rank(self) -> DeviceLayout:
        if len(self.device_size) != len(self.stride_map):
            raise ValueError(
                f"device_size has {len(self.device_size)} dimensions but stride_map has "
                f"{len(self.stride_map)}"
            )
        return self


class TensorSpec(SpecModel):
    shape: list[int]
    dtype: TensorDtype
    device: str = "privateuse1"
    init: str = "rand"
    init_args: InitArgs = Field(default_factory=InitArgs)
    stride: list[int] | None = None
    storage_offset: int = 0
    device_layout: DeviceLayout | None = None


class CacheSpec(SpecModel):
    """A KV cache primed with recorded past keys and values (a decoder layer's decode step)."""

    cache_path: str
    layer_idx: int
    key: TensorSpec
    value: TensorSpec
    max_cache_len: int | None = None
    config_path: str | None = None
    config_kwargs: dict[str, Any] = Field(default_factory=dict)


class InputArg(SpecModel):
    """One argument: a tensor, a tensor list, a plain value, a Python literal, or (module tests)
    a config object, a module built from its class and config, or a primed KV cache."""

    tensor: TensorSpec | None = None
    tensor_list: list[TensorSpec] | None = None
    value: Any = None
    py: str | None = None
    config_path: str | None = None
    model_id: str | None = None
    config_kwargs: dict[str, Any] = Field(default_factory=dict)
    config_overrides: dict[str, Any] = Field(default_factory=dict)
    module_path: str | None = None
    module_kwargs: dict[str, Any] = Field(default_factory=dict)
    cache: CacheSpec | None = None

    @model_validator(mode="after")
    def _config_has_a_source(self) -> InputArg:
        if (self.config_kwargs or self.config_overrides) and not (
            self.config_path or self.model_id or self.module_path
        ):
            raise ValueError("a config argument needs 'config_path' or 'model_id'")
        return self

    @field_validator("py")
    @classmethod
    def _py_literal(cls, v: str | None) -> str | None:
        if v is not None:
            import ast

            try:
                ast.literal_eval(v)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as e:
                if "slice(" not in v and "Ellipsis" not in v:
                    raise ValueError(f"invalid python literal {v!r}: {e}") from None
        return v


#: a keyword argument whose value is a mapping with one of these keys is an argument spec
ARG_SPEC_KEYS = frozenset(
    ("tensor", "tensor_list", "py", "config_path", "model_id", "module_path", "cache")
)


class Inputs(SpecModel):
    args: list[InputArg] = Field(default_factory=list)
    kwargs: dict[str, Any] = Field(default_factory=dict)

    @field_validator("kwargs")
    @classmethod
    def _kwarg_specs(cls, v: dict[str, Any]) -> dict[str, Any]:
        """A keyword argument may be a tensor (or config, module, cache) spec like a positional
        one (``position_ids: {tensor: ...}``): it is checked here, kept as written."""
        for key, value in v.items():
            if isinstance(value, dict) and ARG_SPEC_KEYS & value.keys():
                try:
                    InputArg.model_validate(value)
                except ValidationError as e:
                    first = e.errors()[0]
                    where = ".".join(str(p) for p in first["loc"])
                    msg = str(first["msg"]).removeprefix("Value error, ")
                    raise ValueError(f"{key}: {where}: {msg}") from None
        return v

    def kwarg_spec(self, key: str) -> InputArg | None:
        value = self.kwargs.get(key)
        if isinstance(value, dict) and ARG_SPEC_KEYS & value.keys():
            return InputArg.model_validate(value)
        return None


class OpsIncludeItem(SpecModel):
    """One op-level test of torch-spyre's model op-test files: the op (``torch.add``,
    ``torch.Tensor.expand``), its recorded inputs, tags and the model source line it came from."""

    name: str
    description: str | None = None
    tags: list[str] = Field(default_factory=list)
    sample_inputs_func: Inputs | None = None
    # Some model op-test files write the keyword arguments beside sample_inputs_func rather than
    # inside it; torch-spyre's models ignore unknown keys, so such files load there. They are the
    # op's keyword arguments: merged into the sample inputs' (inside wins).
    kwargs: dict[str, Any] = Field(default_factory=dict)

    def inputs(self) -> Inputs:
        inner = self.sample_inputs_func or Inputs()
        if not self.kwargs:
            return inner
        return Inputs(args=inner.args, kwargs={**self.kwargs, **inner.kwargs})


class ModulesIncludeItem(SpecModel):
    name: str
    module_path: str | None = None
    description: str | None = None
    # Re-allocate the module's parameters with the device's production layout (torch-spyre's
    # custom module tests); a device without a layout concept ignores it.
    apply_device_layout: bool = False
    sample_inputs_func: Inputs | None = None
    constructor_inputs: Inputs | None = None
    forward_inputs: Inputs | list[Inputs] | None = None


# ---- edits --------------------------------------------------------------------------------


class OpsEdits(SpecModel):
    include: list[OpsIncludeItem] = Field(default_factory=list)
    exclude: list[NamedItem] = Field(default_factory=list)

    normalize_names = _bare_names("include", "exclude")


class DtypesEdits(SpecModel):
    include: list[DtypeNamedItem] = Field(default_factory=list)
    exclude: list[DtypeItem] = Field(default_factory=list)

    normalize_names = _bare_names("include", "exclude")


class ModulesEdits(SpecModel):
    include: list[ModulesIncludeItem] = Field(default_factory=list)
    exclude: list[NamedItem] = Field(default_factory=list)

    normalize_names = _bare_names("include", "exclude")


class FunctionsEdits(SpecModel):
    cpu_move: list[NamedItem] = Field(default_factory=list)

    normalize_names = _bare_names("cpu_move")


class CpuMove(SpecModel):
    """torch-spyre's code form: ``cpu_move: {functions: [assertEqual]}``."""

    functions: list[str] = Field(default_factory=list)


class Edits(SpecModel):
    ops: OpsEdits = Field(default_factory=OpsEdits)
    dtypes: DtypesEdits = Field(default_factory=DtypesEdits)
    modules: ModulesEdits = Field(default_factory=ModulesEdits)
    functions: FunctionsEdits = Field(default_factory=FunctionsEdits)
    cpu_move: CpuMove = Field(default_factory=CpuMove)

    def cpu_move_functions(self) -> list[str]:
        return [i.name for i in self.functions.cpu_move] + list(self.cpu_move.functions)

    def is_dtype_restricted(self) -> bool:
        return bool(self.dtypes.include or self.dtypes.exclude)


# ---- our extension ------------------------------------------------------------------------


class TestExtension(SpecModel):
    """Keys under ``x-relay/v1`` on a test entry."""

    __test__ = False
    reason: str | None = None
    owner: str | None = None
    expires: dt.date | None = None
    # A scope: the entry decides only variants of these ops (OpInfo names), modules and dtypes;
    # for any other variant of its names it is not a candidate (rule 4 looks further).
    ops: list[str] | None = None
    modules: list[str] | None = None
    dtypes: list[DtypeName] | None = None
    # Written by `relay specs promote` from run evidence; entries without it are hand-written
    # and survive a re-promotion.
    promoted: bool = False

    def scope(self) -> tuple[Any, ...]:
        return (
            tuple(self.ops or ()),
            tuple(self.modules or ()),
            tuple(self.dtypes or ()),
        )


class OwnerExtension(SpecModel):
    owner: str | None = None
    description: str | None = None


# ---- entries ------------------------------------------------------------------------------


class TestEntry(SpecModel):
    __test__ = False  # not a pytest class

    names: list[TestName] = Field(min_length=1)
    mode: Mode | None = None  # None: listed without a mode -> mandatory_success
    tags: list[str] = Field(default_factory=list)
    labels: list[str] = Field(default_factory=list)  # CI suites the entry belongs to
    no_grad: bool = False
    edits: Edits = Field(default_factory=Edits)
    ext: TestExtension | None = Field(default=None, alias="x-relay/v1")  # EXTENSION_KEY

    _patterns: list[NamePattern] = PrivateAttr(default_factory=list)

    @field_validator("names", mode="before")
    @classmethod
    def _one_name(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    def model_post_init(self, context: Any, /) -> None:
        self._patterns = [parse_name(n) for n in self.names]

    @property
    def patterns(self) -> list[NamePattern]:
        return self._patterns

    @property
    def effective_mode(self) -> str:
        return self.mode or "mandatory_success"

    @property
    def reason(self) -> str | None:
        return self.ext.reason if self.ext else None

    def identity(self) -> tuple[Any, ...]:
        """What makes two blocks the same block for merge de-duplication."""
        return (
            tuple(self.names),
            tuple(self.tags),
            tuple(self.labels),
            self.no_grad,
            self.edits.model_dump_json(),
            self.ext.scope() if self.ext else (),
        )


class FileEntry(SpecModel):
    path: Annotated[str, AfterValidator(_check_path)]
    unlisted_test_mode: Mode = "xfail"
    labels: list[str] = Field(default_factory=list)
    tests: list[TestEntry] = Field(default_factory=list)
    ext: OwnerExtension | None = Field(default=None, alias="x-relay/v1")  # EXTENSION_KEY


class SupportedOpDtype(SpecModel):
    name: DtypeName
    precision: Precision | None = None


class SupportedOp(SpecModel):
    name: str
    force_xfail: bool = False
    dtypes: list[SupportedOpDtype] = Field(default_factory=list)

    normalize_names = _bare_names("dtypes")


class SupportedModule(SpecModel):
    name: str
    force_xfail: bool = False
    dtypes: list[SupportedOpDtype] = Field(default_factory=list)
    constructor_inputs: Inputs | None = None
    forward_inputs: Inputs | list[Inputs] | None = None

    normalize_names = _bare_names("dtypes")


class InputConfig(SpecModel):
    seed: int | None = None


class GlobalConfig(SpecModel):
    supported_dtypes: list[DtypeNamedItem] = Field(default_factory=list)
    supported_ops: list[SupportedOp] | None = None
    supported_modules: list[SupportedModule] | None = None
    input_config: InputConfig = Field(default_factory=InputConfig)
    cpu_move: CpuMove = Field(default_factory=CpuMove)

    normalize_names = _bare_names("supported_dtypes", "supported_ops", "supported_modules")


class SuiteConfig(SpecModel):
    files: list[FileEntry] = Field(min_length=1)
    global_: GlobalConfig = Field(default_factory=GlobalConfig, alias="global")
    labels: list[str] = Field(default_factory=list)
    ext: OwnerExtension | None = Field(default=None, alias="x-relay/v1")  # EXTENSION_KEY


class SpecDocument(SpecModel):
    """One spec file: the root key ``test_suite_config``.

    torch-spyre's model op-test files may also carry a top-level ``cases`` list (the op cases of
    its inductor model runner, a format of their own that its ``test_suite_config`` models
    ignore); it is accepted and kept, not interpreted.
    """

    test_suite_config: SuiteConfig
    cases: list[Any] | None = None

    @property
    def files(self) -> list[FileEntry]:
        return self.test_suite_config.files

    @property
    def global_config(self) -> GlobalConfig:
        return self.test_suite_config.global_
