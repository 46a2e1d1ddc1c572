"""The OpenAPI document as a committed artifact (`make openapi`)."""

from __future__ import annotations

import json

from config.settings import Settings


def render() -> str:
    from relay.app import create_app

    app = create_app(Settings(env="development"))
    return json.dumps(app.openapi(), indent=2, sort_keys=True) + "\n"
