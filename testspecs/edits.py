"""What a spec entry changes about its tests (torch-spyre's ``edits``): the ops, dtypes and
modules it includes or excludes (an included op or module with its recorded inputs), and the
functions moved to the CPU."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from testspecs.input_specs import Inputs
from testspecs.vocabulary import DtypeItem, DtypeNamedItem, NamedItem, SpecModel, bare_names


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


class OpsEdits(SpecModel):
    include: list[OpsIncludeItem] = Field(default_factory=list)
    exclude: list[NamedItem] = Field(default_factory=list)

    normalize_names = bare_names("include", "exclude")


class DtypesEdits(SpecModel):
    include: list[DtypeNamedItem] = Field(default_factory=list)
    exclude: list[DtypeItem] = Field(default_factory=list)

    normalize_names = bare_names("include", "exclude")


class ModulesEdits(SpecModel):
    include: list[ModulesIncludeItem] = Field(default_factory=list)
    exclude: list[NamedItem] = Field(default_factory=list)

    normalize_names = bare_names("include", "exclude")


class FunctionsEdits(SpecModel):
    cpu_move: list[NamedItem] = Field(default_factory=list)

    normalize_names = bare_names("cpu_move")


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
