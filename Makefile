# Set-up on a fresh machine: `make demo` and `make test`. Both create .venv from pyproject.toml.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test lint bench clean check-java

check-java:
	@$(PYTHON) -m icetide.spark.java >/dev/null

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

install: check-java $(STAMP)
	@$(BIN)/python -m icetide.spark.jars >/dev/null

demo: install
	$(BIN)/icetide demo

test: install
	$(BIN)/python -m pytest -q --durations=30 tests

lint: install
	$(BIN)/ruff check icetide tests bench
	$(BIN)/ruff format --check icetide tests bench
	$(BIN)/mypy

bench: install
	$(BIN)/python bench/upsert.py

clean:
	rm -rf $(VENV) warehouse chk .pytest_cache .mypy_cache .ruff_cache
