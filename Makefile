# Set-up on a fresh machine: `make demo` and `make test`. Both create .venv from pyproject.toml.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install install-spark35 demo test test-peers test-spark35 lint docs bench clean check-java system-packages

check-java:
	@$(PYTHON) -m icetide.spark.java >/dev/null

# Exact versions from the constraints file of the default Spark line (pyproject.toml holds ranges).
CONSTRAINTS := constraints/spark-4.1.txt

$(STAMP): pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) -e '.[dev]' 2>$(VENV)/pip.log || { \
		echo "error: pip could not install the Python packages ($$(grep -m1 -o 'ERROR: .*' $(VENV)/pip.log | sed 's/^ERROR: //')): is PyPI reachable? (PIP_INDEX_URL names a mirror; details in $(VENV)/pip.log)" >&2; exit 1; }
	@touch $(STAMP)

# The second Spark line (3.5) in its own venv, for the tests that prove the guarantees (docs/testing.md).
VENV35 := .venv-spark35
STAMP35 := $(VENV35)/.installed

$(STAMP35): pyproject.toml constraints/spark-3.5.txt
	$(PYTHON) -m venv $(VENV35)
	$(VENV35)/bin/python -m pip install --quiet --upgrade pip
	@$(VENV35)/bin/python -m pip install --quiet -c constraints/spark-3.5.txt -e '.[dev]' 2>$(VENV35)/pip.log || { \
		echo "error: pip could not install the Python packages ($$(grep -m1 -o 'ERROR: .*' $(VENV35)/pip.log | sed 's/^ERROR: //')): is PyPI reachable? (PIP_INDEX_URL names a mirror; details in $(VENV35)/pip.log)" >&2; exit 1; }
	@touch $(STAMP35)

# Debian packages the tests need: a PostgreSQL server (the catalog tests and the live CDC test; its JDBC driver comes from
# Maven Central), a MariaDB server (the live CDC test, tests/mariadb_server.py) and Chromium (the status page's browser test). A no-op when they are installed; apt may be locked by another
# install, so it retries; without root or apt-get it only names what is missing.
DEB_PACKAGES := postgresql mariadb-server chromium

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

# Fetches the JVM dependencies by their Maven coordinates and builds icetide's jar (one line on failure).
install: check-java system-packages $(STAMP)
	@$(BIN)/python -m icetide.spark.jars >/dev/null

install-spark35: check-java system-packages $(STAMP35)
	@$(VENV35)/bin/python -m icetide.spark.jars >/dev/null

demo: install
	$(BIN)/icetide demo

test: install
	@$(BIN)/python -m tests.kafka_jars
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --durations=30 -m "not peer" tests

# The peer harness on tiny topics (bench/peers/, docs/peers.md: the Flink and Kafka Connect Iceberg sinks):
# minutes, and PyFlink's own venv.
test-peers: install
	@$(BIN)/python -m tests.kafka_jars
	$(BIN)/python -m pytest -q -m peer tests

# The guarantees on Spark 3.5: the tests marked `guarantee` (docs/testing.md).
test-spark35: install-spark35
	@$(VENV35)/bin/python -m tests.kafka_jars
	$(VENV35)/bin/python -m pytest -q -n 2 --dist loadfile --durations=30 -m guarantee tests

lint: install
	$(BIN)/ruff check icetide tests bench docs_hooks
	$(BIN)/ruff format --check icetide tests bench docs_hooks
	$(BIN)/mypy
	@$(MAKE) --no-print-directory docs

# The docs site (mkdocs.yml, docs/) into site/. Strict: a broken link, or a reference page that
# disagrees with the code (docs_hooks/reference.py), fails the build.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: install
	$(BIN)/python bench/upsert.py

clean:
	rm -rf $(VENV) $(VENV35) warehouse chk site .pytest_cache .mypy_cache .ruff_cache
