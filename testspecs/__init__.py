"""Declarative YAML test specs (torch-spyre ``test_suite_config`` compatible) and their tools.

Importing the package has no side effects: no torch import, no pytest hooks.
"""

from testspecs.errors import SourceLoc, SpecError, SpecIssue
from testspecs.models import EXTENSION_KEY, GRAMMAR_VERSION

__all__ = ["EXTENSION_KEY", "GRAMMAR_VERSION", "SourceLoc", "SpecError", "SpecIssue"]
