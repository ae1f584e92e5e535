# Set-up on a fresh machine: `make demo` and `make test`. Both create .venv from pyproject.toml.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test lint bench clean check-java check-chromium

check-java:
	@$(PYTHON) -m icetide.spark.java >/dev/null

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# Debian's Chromium, for the status page's browser test (tests/test_status_page.py); a no-op when present.
# apt may be locked by another install: retry a few times.
check-chromium:
	@command -v chromium >/dev/null 2>&1 || { \
		if [ "$$(id -u)" != 0 ]; then echo "chromium missing: run as root, or apt-get install chromium"; exit 0; fi; \
		for i in 1 2 3 4 5; do \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium \
				>/dev/null && break; \
			echo "apt-get busy or failed, retrying ($$i)"; sleep 15; \
		done; \
		command -v chromium >/dev/null 2>&1 || { echo "could not install chromium"; exit 1; }; }

install: check-java check-chromium $(STAMP)
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
