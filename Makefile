# Every named target is one command line. The venv stamp below is the only multi-step recipe:
# it creates .venv and installs the project (editable) with its dev extras whenever
# pyproject.toml changes.
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTHON ?= python3
# our packages, top layer first (the layers are the import-linter contract in pyproject.toml)
PACKAGES := cli relay workers planner evaluation fanout inventory selector upstream backends \
	migrations store wire testspecs spyre_stack plugins config

.PHONY: run test test-fast test-slow test-long test-clone lint typecheck bench migrate openapi eval eval-check screenshots test-browser promote-spec seed-fingerprints

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/relay up

# The suite CI runs, on every core the machine has (pytest-xdist: `-n auto`; `--dist loadfile`
# keeps each test file on one worker, so a module's stack starts once). `pytest -n 0` runs it in
# one process, as the other targets do.
test: $(STAMP)
	$(BIN)/pytest -n auto --dist loadfile -m "not slow and not clone and not long" --durations=15

# make test's fast subset: the in-process suites that read the project's own fixtures (payloads,
# examples, docs); `make test-clone` runs it in a bare clone.
test-fast: $(STAMP)
	$(BIN)/pytest -m "not slow and not clone and not long" -q tests/relay tests/wire tests/planner tests/test_tests.py tests/test_docs.py

test-slow: $(STAMP)
	$(BIN)/pytest -m slow

# End-to-end runs of over a minute each; .ci/run runs it after `make test`.
test-long: $(STAMP)
	$(BIN)/pytest -m long --durations=5

# The README's path from a bare clone of HEAD with nothing beside it: `make run` (the demo replay
# included), `make test-fast` there, the tour's submit and the dashboard in chromium
# (tests/web/test_bare_clone.py); .ci/run runs it after `make test-long`.
test-clone: $(STAMP)
	$(BIN)/pytest -m clone

# The HUD in Debian's chromium against a real `relay up` (also part of `make test`).
test-browser: $(STAMP)
	$(BIN)/pytest tests/web/test_hud_browser.py

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy $(PACKAGES)

bench: $(STAMP)
	$(BIN)/python -m benchmarks

migrate: $(STAMP)
	$(BIN)/relay db upgrade

openapi: $(STAMP)
	$(BIN)/relay openapi --output openapi.json

# Every HUD page at a desktop and a narrow width (Debian's chromium through Playwright, against
# `relay up` on a seeded history) into docs/screenshots.
screenshots: $(STAMP)
	$(BIN)/python -m tests.support.screenshots --out docs/screenshots
# The spyre backend's promoted spec (backends/spyre/specs/promoted.yaml) and its baseline summary
# (backends/spyre/baseline-summary.json) from the two stored full runs of torch 2.13.0
# (evaluation/data/groundtruth): failures classed by their stored messages, dtype and device, the
# tolerance failures run once more under device.yaml, the flaky variants measured between the two
# runs (a test checks the spec is fresh against the summary). Other runs: PROMOTE_RUNS="a b".
PROMOTE_RUNS ?= evaluation/data/groundtruth/2.13.0-run1.json.xz evaluation/data/groundtruth/2.13.0-run2.json.xz
promote-spec: $(STAMP)
	$(BIN)/relay specs promote $(addprefix --runs ,$(PROMOTE_RUNS)) --write

# The shipped behaviour fingerprints of the demo replay's two torches
# (upstream/changes/fingerprint_seeds), made again after upstream/changes/fingerprint_ops.py
# changed (a test says so): about an hour on 2 cores, the 2.14.1 environment made once.
seed-fingerprints: $(STAMP)
	$(BIN)/relay upstream fingerprints --torch 2.13.0 --torch 2.14.1 --write-seeds

# Ground truth on the whole bundled universe, then the recall tables (long, cached in var/eval):
# mutation = 150 sampled source mutants, each laid over the base torch and run over the variants
# whose traced run reached its function, 10 of them again over the whole universe (the
# restriction check; stored per mutant, a killed run resumes); release = the full universe under
# each torch of a step (a second virtual environment made in var/envs).
eval: $(STAMP)
	$(BIN)/relay eval --kind mutation --run --report var/eval/report-mutation.md
	$(BIN)/relay eval --kind release --run --report var/eval/report-release.md

# Checks that restricting mutant runs to their traces changes nothing, on the modules suite:
# every sampled mutant also run over the whole suite.
eval-check: $(STAMP)
	$(BIN)/relay eval --kind mutation --suite modules --run --check-restriction 150 \
		--report var/eval/report-mutation-modules.md
