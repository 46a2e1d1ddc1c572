"""Benchmarks run by `make bench`.

Each ``benchmarks/bench_<name>.py`` module defines ``run(report: Report) -> None`` and adds one or
more tables to the report. Every table compares against a baseline measured in the same run
(ratios, never absolute limits). ``python -m benchmarks [NAME ...]`` runs all or some of them,
prints Markdown tables and writes them to ``var/bench/latest.md`` for the README.
"""
