# Set-up on a fresh machine: `make demo` and `make test`. Both create .venv from pyproject.toml.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test lint bench clean check-java system-packages

check-java:
	@$(PYTHON) -m icetide.spark.java >/dev/null

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# Debian packages the tests need: a PostgreSQL server and its JDBC driver (the catalog tests; the
# driver is also what `catalog: {type: jdbc, uri: jdbc:postgresql://...}` needs) and Chromium (the
# status page's browser test). A no-op when they are installed; apt may be locked by another
# install, so it retries; without root or apt-get it only names what is missing.
DEB_PACKAGES := postgresql libpostgresql-jdbc-java chromium

system-packages:
	@missing=$$(for p in $(DEB_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			for i in 1 2 3 4 5; do \
				apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing \
					>/dev/null && break; \
				echo "apt-get busy or failed, retrying ($$i)"; sleep 15; \
			done; \
		else \
			echo "note: Debian packages missing (catalog and browser tests need them): sudo apt-get install $$missing" >&2; \
		fi; \
	fi

install: check-java system-packages $(STAMP)
	@$(BIN)/python -m icetide.spark.jars >/dev/null

demo: install
	$(BIN)/icetide demo

test: install
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --durations=30 tests

lint: install
	$(BIN)/ruff check icetide tests bench
	$(BIN)/ruff format --check icetide tests bench
	$(BIN)/mypy

bench: install
	$(BIN)/python bench/upsert.py

clean:
	rm -rf $(VENV) warehouse chk .pytest_cache .mypy_cache .ruff_cache
