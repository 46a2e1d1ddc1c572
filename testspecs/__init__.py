"""Declarative YAML test specs (torch-spyre ``test_suite_config`` compatible) and their tools.

Importing the package has no side effects and imports nothing: no torch, no pytest hooks, no
pydantic (:mod:`.outcomes` loads in every test process of ours). The spec model is
:mod:`.models` (the document) with its parts :mod:`.vocabulary`, :mod:`.input_specs` and
:mod:`.edits`; errors :mod:`.errors`, loading :mod:`.loader`, resolution :mod:`.resolve`, the
pytest plugin :mod:`.pytest_plugin`.
"""
