"""Pydantic models of the spec grammar: torch-spyre's ``test_suite_config`` plus our extension.

Every torch-spyre key is modelled (including the input-description keys its model-ops files use)
so that a torch-spyre file validates unchanged while an unknown key is still an error. Our own keys
live under ``EXTENSION_KEY`` (a key whose name carries the extension's version), which torch-spyre's
loader ignores. This module is the document (entries, files, the global config, the suite); its
parts are :mod:`testspecs.vocabulary` (version, modes, dtypes, names, the base),
:mod:`testspecs.input_specs` (recorded inputs) and :mod:`testspecs.edits`.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import Field, PrivateAttr, field_validator

from testspecs.edits import CpuMove, Edits
from testspecs.input_specs import Inputs
from testspecs.names import NamePattern, parse_name
from testspecs.vocabulary import (
    DtypeName,
    DtypeNamedItem,
    Mode,
    Precision,
    SpecModel,
    SpecPath,
    TestName,
    bare_names,
)

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
    path: SpecPath
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

    normalize_names = bare_names("dtypes")


class SupportedModule(SpecModel):
    name: str
    force_xfail: bool = False
    dtypes: list[SupportedOpDtype] = Field(default_factory=list)
    constructor_inputs: Inputs | None = None
    forward_inputs: Inputs | list[Inputs] | None = None

    normalize_names = bare_names("dtypes")


class InputConfig(SpecModel):
    seed: int | None = None


class GlobalConfig(SpecModel):
    supported_dtypes: list[DtypeNamedItem] = Field(default_factory=list)
    supported_ops: list[SupportedOp] | None = None
    supported_modules: list[SupportedModule] | None = None
    input_config: InputConfig = Field(default_factory=InputConfig)
    cpu_move: CpuMove = Field(default_factory=CpuMove)

    normalize_names = bare_names("supported_dtypes", "supported_ops", "supported_modules")


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
