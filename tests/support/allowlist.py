"""An allowlist in CRCR's ``.github/allowlist.yml`` format with every documented shape."""

from __future__ import annotations

SAMPLE = """
L1:
  - org/repo-a
  - org/repo-b: "oncall1, oncall2"
L2:
  - org/repo-c: {events: [pull_request, nightly], oncalls: [someone]}
L3:
  some-device:
    org/repo-d: [oncall3]
L4: []
"""
