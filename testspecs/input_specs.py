"""The input descriptions of torch-spyre's model op-test files: a recorded tensor (shape, dtype,
initialisation, device layout), a tensor list, a literal, a config, a module or a primed KV
cache, as positional or keyword arguments (:mod:`testspecs.inputs` builds them)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from testspecs.vocabulary import SpecModel, TensorDtype


class InitArgs(SpecModel):
    low: int = 0
    high: int | None = None
    total: int | None = None  # init: cumsum_offsets
    fill_value: float | None = None
    path: str | None = None
    key: str | None = None


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
