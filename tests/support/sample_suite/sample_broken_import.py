"""A sample test module that fails to import, as an upstream change that renames a helper under
a test module breaks it: the runner records its tests ``error`` with the import error."""

from os.path import renamed_helper


def test_uses_the_helper():
    assert renamed_helper("a") == "a"
