"""The line-aware loader: one fixture per case, exact messages, and property tests."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testspecs.errors import SpecError
from testspecs.loader import load_files, load_text

FIXTURES = Path(__file__).parent / "fixtures"
VALID = sorted((FIXTURES / "valid").glob("*.yaml"))
INVALID = sorted((FIXTURES / "invalid").glob("*.yaml"))


def _load_fixture(path: Path):
    return load_text(path.read_text(), f"{path.parent.name}/{path.name}")


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.stem)
def test_valid_fixture_loads(path: Path) -> None:
    spec = _load_fixture(path)
    assert spec.document.files
    # every test entry knows where it was defined
    for f in spec.document.files:
        assert f.loc is not None and f.loc.line > 1
        for t in f.tests:
            assert t.loc is not None


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.stem)
def test_invalid_fixture_exact_messages(path: Path) -> None:
    expected = path.with_suffix(".expected").read_text().splitlines()
    with pytest.raises(SpecError) as info:
        _load_fixture(path)
    assert info.value.messages == expected


def test_every_invalid_fixture_has_expected_messages() -> None:
    assert len(INVALID) >= 10
    for path in INVALID:
        assert path.with_suffix(".expected").is_file(), path


def test_three_mistakes_give_three_messages() -> None:
    with pytest.raises(SpecError) as info:
        _load_fixture(FIXTURES / "invalid" / "three_errors.yaml")
    assert [i.loc.line for i in info.value.issues] == [6, 8, 9]
    assert [i.path[-1] for i in info.value.issues] == ["mode", "tag", 0]


def test_extension_keys_are_typed() -> None:
    spec = _load_fixture(FIXTURES / "valid" / "extension.yaml")
    entry = spec.document.files[0].tests[0]
    assert entry.reason == "https://github.com/example/spyre/issues/12"
    assert entry.ext is not None and entry.ext.expires == dt.date(2027, 1, 31)
    assert entry.ext.owner == "alice"
    assert spec.document.files[0].tests[1].edits.cpu_move_functions() == ["assertEqual"]


def test_torch_spyre_forms_normalise() -> None:
    spec = _load_fixture(FIXTURES / "valid" / "binary_ufuncs.yaml")
    g = spec.document.global_config
    assert g.supported_ops is not None
    add = g.supported_ops[0]
    assert add.dtypes[0].precision is not None and add.dtypes[0].precision.atol == pytest.approx(
        1e-3
    )
    entry = spec.document.files[0].tests[2]
    assert entry.patterns[0].method.kind == "regex"
    assert entry.edits.cpu_move_functions() == ["assertEqual", "assertTrue"]
    mods = _load_fixture(FIXTURES / "valid" / "module_tests.yaml").document
    glob = mods.files[0].tests[0].patterns[0]
    assert glob.cls is not None and glob.cls.kind == "glob"
    assert glob.matches("TestModulePRIVATEUSE1", "test_forward")
    # the alias reuses the anchored include list
    assert mods.files[1].tests[0].edits.modules.include[0].name == "RMSNorm_4096"


def test_relative_path_is_a_warning_not_an_error() -> None:
    spec = load_text("test_suite_config:\n  files:\n    - path: test/test_ops.py\n", "w.yaml")
    assert [str(w) for w in spec.warnings] == [
        "w.yaml:3:13: warning: test_suite_config.files[0].path: path 'test/test_ops.py' has no "
        "${TORCH_ROOT}/${TORCH_DEVICE_ROOT} token and is not absolute; it is resolved against "
        "the tests root"
    ]


def test_load_files_reports_all_files_at_once(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(
        "test_suite_config: {files: [{path: /x.py, tests: [{names: [a], mode: no}]}]}\n"
    )
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.yml").write_text("test_suite_config: {}\n")
    with pytest.raises(SpecError) as info:
        load_files([tmp_path])
    files = {i.loc.file for i in info.value.issues}
    assert files == {str(tmp_path / "a.yaml"), str(tmp_path / "sub" / "b.yml")}


def test_recursive_alias_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="nested deeper than 64 levels"):
        load_text("&a {x: *a}")


def test_an_alias_bomb_is_a_spec_error() -> None:
    # nine levels of ten aliases each: a few hundred characters that expand to 10**9 values
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    text = "x-relay/v1: {}\ntest_suite_config:\n  " + "\n  ".join(lines) + "\n"
    with pytest.raises(SpecError, match="expands to more than 200,000 values") as info:
        load_text(text)
    assert len(info.value.issues) == 1


def test_a_large_document_without_aliases_loads() -> None:
    # more values than the alias-bomb floor (200,000), each written out: the budget follows
    # the text's length (torch-spyre's largest model op files hold about 60,000 values)
    names = ", ".join(f"t{i}" for i in range(220_000))
    text = (
        "test_suite_config:\n  files:\n  - path: /x/test_a.py\n    tests:\n"
        f"    - names: [{names}]\n      mode: skip\n"
    )
    spec = load_text(text)
    assert len(spec.document.files[0].tests[0].names) == 220_000


# ---- property tests: the loader only ever raises SpecError ------------------------------

_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(
        ["skip", "xfail", "float16", "test_.*", "(", "${TORCH_ROOT}/x.py", "2026-01-01"]
    ),
)
_keys = st.sampled_from(
    [
        "test_suite_config",
        "files",
        "path",
        "tests",
        "names",
        "mode",
        "tags",
        "edits",
        "ops",
        "dtypes",
        "include",
        "exclude",
        "name",
        "global",
        "supported_dtypes",
        "supported_ops",
        "precision",
        "atol",
        "force_xfail",
        "x-relay/v1",
        "reason",
        "expires",
        "unlisted_test_mode",
        "functions",
        "cpu_move",
        "modules",
        "input_config",
        "seed",
        "sample_inputs_func",
        "args",
    ]
) | st.text(max_size=6)
_docs = st.recursive(
    _scalar,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_keys, children, max_size=5),
    max_leaves=25,
)


def _expect_only_spec_errors(text: str) -> None:
    try:
        load_text(text, "p.yaml")
    except SpecError as e:
        assert e.issues, "a SpecError always carries at least one issue"
        for issue in e.issues:
            assert issue.loc.line >= 1 and issue.loc.column >= 1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_docs)
def test_random_documents_only_raise_spec_error(doc: object) -> None:
    _expect_only_spec_errors(yaml.safe_dump({"test_suite_config": doc}))
    _expect_only_spec_errors(yaml.safe_dump(doc))


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("{}[]:-,&*!|>'\"#%@` \n\tab1.?<")), max_size=40))
def test_random_yamlish_text_only_raises_spec_error(text: str) -> None:
    _expect_only_spec_errors(text)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_mutated_valid_specs_only_raise_spec_error(data: st.DataObject) -> None:
    path = data.draw(st.sampled_from(VALID))
    lines = path.read_text().splitlines()
    op = data.draw(
        st.sampled_from(["delete", "duplicate", "indent", "dedent", "replace", "truncate"])
    )
    i = data.draw(st.integers(0, len(lines) - 1))
    if op == "delete":
        del lines[i]
    elif op == "duplicate":
        lines.insert(i, lines[i])
    elif op == "indent":
        lines[i] = "  " + lines[i]
    elif op == "dedent":
        lines[i] = lines[i][2:]
    elif op == "replace":
        lines[i] = lines[i][: data.draw(st.integers(0, len(lines[i])))] + data.draw(
            _scalar.map(str)
        )
    else:
        lines = lines[:i]
    _expect_only_spec_errors("\n".join(lines) + "\n")


def test_extension_key_is_the_alias_everywhere() -> None:
    from testspecs.models import FileEntry, SuiteConfig, TestEntry
    from testspecs.vocabulary import EXTENSION_KEY

    for model in (TestEntry, FileEntry, SuiteConfig):
        assert model.model_fields["ext"].alias == EXTENSION_KEY
