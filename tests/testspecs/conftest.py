"""Fixture test files are data read by lint / new / the plugin tests, never collected here."""

collect_ignore_glob = ["fixtures/*"]
