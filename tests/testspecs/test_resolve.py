"""Resolution: one test per reference rule (testspec-format.md, "Resolution rules")."""

from __future__ import annotations

import textwrap

import pytest

from testspecs.compiled import compile_spec
from testspecs.errors import SpecError
from testspecs.loader import load_text
from testspecs.merge import merge
from testspecs.names import parse_variant, variant_dtype
from testspecs.resolve import resolve

FILE = "test/test_binary_ufuncs.py"
CLS = "TestBinaryUfuncsPRIVATEUSE1"


def spec(body: str, glob: str = "", name: str = "s.yaml"):
    text = "test_suite_config:\n  files:\n    - path: ${TORCH_ROOT}/test/test_binary_ufuncs.py\n"
    text += textwrap.indent(textwrap.dedent(body), "      ")
    if glob:
        text += "  global:\n" + textwrap.indent(textwrap.dedent(glob), "    ")
    return compile_spec(merge([load_text(text, name)]))


def v(method: str) -> str:
    return f"{FILE}::{CLS}::{method}"


# ---- rule 1: mode precedence ------------------------------------------------------------


def test_rule1_listed_with_mode() -> None:
    s = spec("tests:\n  - names: [TestBinaryUfuncs::test_a]\n    mode: xfail_strict\n")
    d = resolve(s, v("test_a_spyre"))
    assert (d.run, d.mode, d.rule) == (True, "xfail_strict", "rule 1: listed with a mode")
    assert d.entry is not None and d.entry.loc is not None and d.entry.loc.line == 5


def test_rule1_listed_without_mode_is_mandatory() -> None:
    s = spec("unlisted_test_mode: skip\ntests:\n  - names: [test_a]\n")
    d = resolve(s, v("test_a_spyre_float32"))
    assert (d.run, d.mode) == (True, "mandatory_success")
    assert "listed without a mode" in d.rule


def test_rule1_unlisted_uses_file_mode_and_default_is_xfail() -> None:
    s = spec("unlisted_test_mode: skip\ntests:\n  - names: [test_a]\n")
    d = resolve(s, v("test_b_spyre"))
    assert (d.run, d.mode, d.entry) == (False, "skip", None)
    s = spec("tests:\n  - names: [test_a]\n")
    assert resolve(s, v("test_b_spyre")).mode == "xfail"


def test_rule1_skip_mode_is_not_generated() -> None:
    s = spec("tests:\n  - names: [test_a]\n    mode: skip\n")
    assert resolve(s, v("test_a_spyre_float16")).run is False


@pytest.mark.parametrize(
    ("glob", "why"),
    [
        ("supported_ops: [{name: add, force_xfail: true}]\n", "op add"),
        ("supported_dtypes: [{name: float16, force_xfail: true}]\n", "dtype float16"),
    ],
)
def test_rule1_force_xfail_turns_mandatory_into_xfail(glob: str, why: str) -> None:
    s = spec("tests:\n  - names: [test_a]\n", glob)
    d = resolve(s, v("test_a_add_spyre_float16"), op="add")
    assert (d.run, d.mode) == (True, "xfail")
    assert d.rule == f"rule 1: force_xfail on {why}"


def test_rule1_force_xfail_on_module() -> None:
    s = spec(
        "tests:\n  - names: [test_m]\n",
        "supported_modules: [Linear, {name: LayerNorm, force_xfail: true}]\n",
    )
    assert resolve(s, v("test_m_nn_LayerNorm_spyre_float32"), module="LayerNorm").mode == "xfail"
    assert (
        resolve(s, v("test_m_nn_Linear_spyre_float32"), module="torch.nn.Linear").mode
        == "mandatory_success"
    )
    assert resolve(s, v("test_m_nn_Conv2d_spyre_float32"), module="Conv2d").run is False


def test_rule1_force_xfail_never_the_reverse() -> None:
    s = spec(
        "tests:\n  - names: [test_a]\n    mode: xfail_strict\n",
        "supported_ops: [{name: add, force_xfail: true}]\n",
    )
    assert resolve(s, v("test_a_add_spyre_float16"), op="add").mode == "xfail_strict"


# ---- rule 2: effective dtypes -------------------------------------------------------------


GLOBAL_DTYPES = """\
supported_dtypes: [float16, float32]
supported_ops:
  - name: add
    dtypes: [{name: float16, precision: {atol: 0.001}}]
  - mul
"""


def test_rule2_global_intersect_op_dtypes() -> None:
    s = spec("tests:\n  - names: [test_a]\n", GLOBAL_DTYPES)
    assert resolve(s, v("test_a_add_spyre_float16"), op="add").run
    d = resolve(s, v("test_a_add_spyre_float32"), op="add")
    assert not d.run and d.rule.startswith("rule 2")
    assert resolve(s, v("test_a_mul_spyre_float32"), op="mul").run
    assert not resolve(s, v("test_a_mul_spyre_int64"), op="mul").run
    assert not resolve(s, v("test_a_mul_spyre_float16"), op="mul", allowed_dtypes=["float32"]).run


def test_rule2_include_extends_and_exclude_always_wins() -> None:
    body = """\
    tests:
      - names: [test_a]
        edits:
          dtypes:
            include: [bfloat16, float64]
            exclude: [float64, float32]
    """
    s = spec(body, GLOBAL_DTYPES)
    assert resolve(s, v("test_a_mul_spyre_bfloat16"), op="mul").run  # not limited by global
    assert not resolve(s, v("test_a_mul_spyre_float64"), op="mul").run  # exclude wins
    d = resolve(s, v("test_a_mul_spyre_float32"), op="mul")
    assert (d.run, d.rule) == (False, "rule 2: edits.dtypes.exclude removes float32")


def test_ops_filtering_and_edits() -> None:
    body = "tests:\n  - names: [test_a]\n    edits:\n      ops:\n        include: [{name: gcd, tags: [int]}]\n        exclude: [mul]\n"
    s = spec(body, GLOBAL_DTYPES)
    assert (
        resolve(s, v("test_a_sub_spyre_float16"), op="sub").rule
        == "op sub is not in global.supported_ops"
    )
    assert (
        resolve(s, v("test_a_mul_spyre_float16"), op="mul").rule == "edits.ops.exclude removes mul"
    )
    d = resolve(s, v("test_a_gcd_spyre_float16"), op="gcd")
    assert d.run and d.tags == ("int",)


def test_precision_precedence() -> None:
    body = "tests:\n  - names: [test_a]\n    edits:\n      dtypes:\n        include: [{name: float16, precision: {rtol: 0.5}}]\n"
    glob = "supported_dtypes: [{name: float16, precision: {atol: 9, rtol: 9}}]\nsupported_ops: [{name: add, dtypes: [{name: float16, precision: {atol: 0.001}}]}]\n"
    d = resolve(spec(body, glob), v("test_a_add_spyre_float16"), op="add")
    assert (d.atol, d.rtol) == (0.001, 0.5)


# ---- rule 3: dtype and op from the variant name ---------------------------------------------


def test_rule3_dtype_from_name() -> None:
    assert variant_dtype("test_add_spyre_float16") == "float16"
    assert variant_dtype("test_x_spyre_complex128") == "complex128"
    assert variant_dtype("test_x_float16_spyre") == "float16"  # inside: _float16_
    assert variant_dtype("test_x_uint8_spyre_int8") == "int8"  # the one at the end wins
    assert variant_dtype("test_cat_int8_float16_x") == "float16"  # else the longest inside
    assert variant_dtype("test_interpolate_spyre") is None


def test_rule3_op_by_stripping_base_and_device() -> None:
    p = parse_variant(f"{FILE}::{CLS}::test_contig_linalg_norm_spyre_float32")
    assert (p.base_cls, p.prefix, p.dtype) == (
        "TestBinaryUfuncs",
        "test_contig_linalg_norm",
        "float32",
    )
    s = spec("tests:\n  - names: [TestBinaryUfuncs::test_contig]\n    mode: xfail\n")
    d = resolve(s, p.test_id)
    assert (d.base, d.op, d.dtype, d.mode) == (
        "TestBinaryUfuncs::test_contig",
        "linalg_norm",
        "float32",
        "xfail",
    )
    d = resolve(s, p.test_id, op="linalg.norm")
    assert (d.base, d.mode) == ("TestBinaryUfuncs::test_contig", "xfail")


def test_half_is_float16() -> None:
    s = spec("tests:\n  - names: [test_a]\n", "supported_dtypes: [half]\n")
    assert resolve(s, v("test_a_spyre_float16")).run
    assert not resolve(s, v("test_a_spyre_float32")).run


# ---- rule 4: several entries for one base name --------------------------------------------


SEVERAL = """\
tests:
  - names: [test_a]
    mode: xfail
    edits: {dtypes: {include: [bfloat16]}}
  - names: [test_a]
    mode: xfail_strict
  - names: [test_a]
    mode: skip
    edits: {dtypes: {exclude: [float16]}}
"""


def test_rule4_entry_whose_dtypes_contain_the_variant() -> None:
    s = spec(SEVERAL, "supported_dtypes: [float16]\n")
    d = resolve(s, v("test_a_spyre_bfloat16"))
    assert (d.mode, d.entry.index if d.entry else None) == ("xfail", 0)
    assert d.explanation[0].startswith("rule 4: first of 3 entries whose effective dtypes contain")


def test_rule4_else_the_unrestricted_entry() -> None:
    s = spec(SEVERAL, "supported_dtypes: [float16]\n")
    d = resolve(s, v("test_a_spyre_int64"))
    assert d.entry is not None and d.entry.index == 1
    assert "first entry without a dtype restriction" in d.explanation[0]
    # the chosen entry's filter still applies: int64 is not an effective dtype
    assert not d.run


def test_rule4_else_the_first() -> None:
    body = "tests:\n  - names: [test_a]\n    mode: xfail\n    edits: {dtypes: {exclude: [int8]}}\n  - names: [test_a]\n    edits: {dtypes: {exclude: [int8]}}\n"
    d = resolve(spec(body), v("test_a_spyre_int8"))
    assert d.entry is not None and d.entry.index == 0 and "the first of 2" in d.explanation[0]


def test_names_regex_glob_and_class() -> None:
    body = """\
    tests:
      - names: ["TestBinaryUfuncs::test_pow_.*"]
        mode: xfail
      - names: ["*Binary*::test_glob_?"]
        mode: xfail_strict
      - names: ["OtherClass::test_b"]
        mode: skip
    """
    s = spec(body)
    assert resolve(s, v("test_pow_tensor_spyre_float16")).mode == "xfail"
    assert (
        resolve(s, v("test_pow_spyre_float16")).mode == "xfail"
    )  # 'test_pow' is no match; unlisted
    assert resolve(s, v("test_pow_spyre_float16")).entry is None
    assert resolve(s, v("test_glob_x_spyre")).mode == "xfail_strict"
    assert resolve(s, v("test_b_spyre")).entry is None  # other class


def test_explain_names_entry_and_rule() -> None:
    s = spec(
        "tests:\n  - names: [test_a]\n    mode: xfail\n    x-relay/v1: {reason: 'https://x/issues/3'}\n"
    )
    text = resolve(s, v("test_a_spyre_float16")).explain()
    assert "run as xfail" in text
    assert "decided by: s.yaml:5:11: tests[0] ['test_a'] (rule: rule 1: listed with a mode)" in text
    assert "reason: https://x/issues/3" in text


# ---- rule 5: merging ----------------------------------------------------------------------


def _file(body: str, name: str, glob: str = ""):
    text = "test_suite_config:\n  files:\n    - path: ${TORCH_ROOT}/test/test_binary_ufuncs.py\n"
    text += textwrap.indent(textwrap.dedent(body), "      ")
    if glob:
        text += "  global:\n" + textwrap.indent(textwrap.dedent(glob), "    ")
    return load_text(text, name)


def test_rule5_same_path_concatenates_and_first_unlisted_mode_wins() -> None:
    a = _file("unlisted_test_mode: skip\ntests:\n  - names: [test_a]\n", "a.yaml")
    b = _file(
        "unlisted_test_mode: mandatory_success\ntests:\n  - names: [test_b]\n    mode: xfail\n",
        "b.yaml",
    )
    m = merge([a, b])
    assert len(m.document.files) == 1
    assert [t.names for t in m.document.files[0].tests] == [["test_a"], ["test_b"]]
    assert m.document.files[0].unlisted_test_mode == "skip"
    assert len(m.warnings) == 1 and m.warnings[0].message.endswith("('skip' at a.yaml:3:7) wins")
    s = compile_spec(m)
    assert resolve(s, v("test_b_spyre")).mode == "xfail"
    assert not resolve(s, v("test_c_spyre")).run


def test_rule5_blocks_dedupe_only_when_identical() -> None:
    a = _file("tests:\n  - names: [test_a]\n    tags: [x]\n", "a.yaml")
    b = _file(
        "tests:\n  - names: [test_a]\n    tags: [x]\n  - names: [test_a]\n    tags: [y]\n", "b.yaml"
    )
    m = merge([a, b])
    assert [t.tags for t in m.document.files[0].tests] == [["x"], ["y"]]


def test_rule5_identical_block_with_other_mode_is_a_conflict() -> None:
    a = _file("tests:\n  - names: [test_a]\n    mode: xfail\n", "a.yaml")
    b = _file("tests:\n  - names: [test_a]\n    mode: skip\n", "b.yaml")
    with pytest.raises(SpecError) as info:
        merge([a, b])
    assert info.value.messages == [
        "b.yaml:5:11: tests.test_a.mode: conflicting mode for an identical test block: 'skip' here, "
        "'xfail' at a.yaml:5:11"
    ]


def test_rule5_global_lists_union_and_conflicting_scalars() -> None:
    a = _file(
        "tests: []\n",
        "a.yaml",
        "supported_dtypes: [{name: float16, precision: {atol: 0.1}}]\nsupported_ops: [add]\n",
    )
    b = _file(
        "tests: []\n",
        "b.yaml",
        "supported_dtypes: [float32, {name: float16, precision: {rtol: 0.2}}]\nsupported_ops: [mul]\n",
    )
    g = merge([a, b]).document.global_config
    assert [d.name for d in g.supported_dtypes] == ["float16", "float32"]
    assert g.supported_dtypes[0].precision is not None
    assert (g.supported_dtypes[0].precision.atol, g.supported_dtypes[0].precision.rtol) == (
        0.1,
        0.2,
    )
    assert [o.name for o in g.supported_ops or []] == ["add", "mul"]
    c = _file(
        "tests: []\n",
        "c.yaml",
        "supported_dtypes: [{name: float16, precision: {atol: 0.5}}]\ninput_config: {seed: 1}\n",
    )
    d = _file("tests: []\n", "d.yaml", "input_config: {seed: 2}\n")
    with pytest.raises(SpecError) as info:
        merge([a, c, d])
    assert info.value.messages == [
        "c.yaml:6:51: test_suite_config.global.supported_dtypes.float16.precision.atol: conflicting atol: "
        "0.5 here, 0.1 at a.yaml:6:51",
        "d.yaml:6:19: test_suite_config.global.input_config.seed: conflicting seed: 2 here, 1 at c.yaml:7:19",
    ]


def test_no_file_entry_is_default_xfail() -> None:
    s = spec("tests:\n  - names: [test_a]\n")
    d = resolve(s, "test/test_other.py::TestOtherPRIVATEUSE1::test_a_spyre")
    assert (d.mode, d.entry) == ("xfail", None)
    assert d.explanation == ["no spec file entry covers test/test_other.py"]
