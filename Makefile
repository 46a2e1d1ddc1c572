# Every named target is one tool call. The venv stamp below is the only multi-step recipe:
# it creates .venv and installs the project (editable) with its dev extras whenever
# pyproject.toml changes.
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTHON ?= python3

.PHONY: run test test-slow lint typecheck bench migrate openapi eval

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/relay up

test: $(STAMP)
	$(BIN)/pytest -m "not slow"

test-slow: $(STAMP)
	$(BIN)/pytest -m slow

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy relay workers selector testspecs spyre_stack

bench: $(STAMP)
	$(BIN)/python -m benchmarks

migrate: $(STAMP)
	$(BIN)/relay db upgrade

openapi: $(STAMP)
	$(BIN)/relay openapi --output openapi.json

# Mutation ground truth on the modules suite (long: about 20 s per mutant), then the recall table.
eval: $(STAMP)
	$(BIN)/relay eval --suite modules --run --report var/eval/report-mutation-modules.md
