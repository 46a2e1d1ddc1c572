"""JSON Schema of the spec grammar, for editors (``relay specs schema``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from testspecs.models import SpecDocument
from testspecs.vocabulary import EXTENSION_KEY, GRAMMAR_VERSION

# Committed artifact for editors (yaml-language-server: $schema=...); a test keeps it fresh.
SCHEMA_FILE = Path(__file__).resolve().parent / f"testspec-v{GRAMMAR_VERSION}.schema.json"
SCHEMA_ID = f"https://crcr-relay.invalid/schemas/testspec-v{GRAMMAR_VERSION}.json"


def json_schema() -> dict[str, Any]:
    schema = SpecDocument.model_json_schema(by_alias=True, mode="validation")
    _loosen(schema)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = SCHEMA_ID
    schema["title"] = "torch-spyre test_suite_config (with the crcr-relay extension)"
    schema["description"] = (
        f"Grammar version {GRAMMAR_VERSION}. Our keys live under {EXTENSION_KEY!r}; every other key "
        "is torch-spyre's. Names with metacharacters are globs (only * and ?) or regexes."
    )
    return schema


def schema_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"


_BARE_NAME_LISTS = {
    "GlobalConfig": ("supported_dtypes", "supported_ops", "supported_modules"),
    "OpsEdits": ("include", "exclude"),
    "DtypesEdits": ("include", "exclude"),
    "ModulesEdits": ("include", "exclude"),
    "FunctionsEdits": ("cpu_move",),
    "SupportedOp": ("dtypes",),
    "SupportedModule": ("dtypes",),
}
# YAML 1.1 reads ``1e-3`` (no dot) as a string; the loader accepts it as a float.
_FLOAT_STRING = {"type": "string", "pattern": r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$"}


def _loosen(schema: dict[str, Any]) -> None:
    """Teach the schema what the loader normalises: bare names in lists, float strings."""
    defs = schema.get("$defs", {})
    for model, fields in _BARE_NAME_LISTS.items():
        props = defs.get(model, {}).get("properties", {})
        for name in fields:
            prop = props.get(name)
            if prop is None:
                continue
            for variant in [prop, *prop.get("anyOf", [])]:
                if variant.get("type") == "array" and "items" in variant:
                    variant["items"] = {"anyOf": [{"type": "string"}, variant["items"]]}
    names = defs.get("TestEntry", {}).get("properties", {}).get("names")
    if names is not None:
        defs["TestEntry"]["properties"]["names"] = {"anyOf": [{"type": "string"}, names]}
    for key in ("atol", "rtol"):
        prop = defs.get("Precision", {}).get("properties", {}).get(key)
        if prop is not None and "anyOf" in prop:
            prop["anyOf"].insert(1, _FLOAT_STRING)
