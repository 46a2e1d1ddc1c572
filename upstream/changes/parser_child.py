"""The entry point of a parser child of :mod:`upstream.changes.parsers` (``python -P -m
upstream.changes.parser_child``): batches in on stdin, symbol changes out on stdout."""

from __future__ import annotations

import sys

from upstream.changes.parsers import serve

if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)
