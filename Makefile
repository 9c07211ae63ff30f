# The two commands a newcomer needs: `make demo` and `make test`.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=
# Test processes (pytest-xdist; 0 runs the suite in this one). Most tests wait on other
# processes and the database, so two keep a 2-core machine busy; each file stays in one.
TEST_WORKERS ?= 2

.PHONY: test demo tour lint clean bench coverage

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

## test: the whole suite, on SQLite and PostgreSQL (a bundled server starts when none answers)
test: $(BIN)/.installed
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/lint-imports --no-cache
	$(BIN)/mypy
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

## demo: the weekly digest story with worker processes and a crash, on a throw-away SQLite file
demo: $(BIN)/.installed
	$(BIN)/jobledger demo

## tour: the README's five-minute tour, on a throw-away SQLite file
tour: $(BIN)/.installed
	$(BIN)/python examples/quick_tour.py

## bench: the benchmark on SQLite and PostgreSQL (127.0.0.1:5432) with the other queues beside
## it; prints a table and writes bench/results.json (BENCH_ARGS=--quick for a short run)
BENCH_ARGS ?= --compare
bench: $(BIN)/.installed
	$(BIN)/python -m bench $(BENCH_ARGS)

## lint: style, types and layer contracts (make test runs them first)
lint: $(BIN)/.installed
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/lint-imports
	$(BIN)/mypy

## coverage: the suite under coverage.py, worker processes included; prints the lines no test
## runs and writes htmlcov/ (docs/guarantees.md, "Lines no test runs"). About twice as slow.
coverage: $(BIN)/.installed
	rm -rf .coverage-data htmlcov && mkdir .coverage-data
	-COVERAGE_RCFILE=$(CURDIR)/pyproject.toml COVERAGE_FILE=$(CURDIR)/.coverage-data/run \
		$(BIN)/coverage run -m pytest -n $(TEST_WORKERS) --dist loadfile -q -p no:cacheprovider $(PYTEST_ARGS)
	COVERAGE_RCFILE=$(CURDIR)/pyproject.toml $(BIN)/coverage combine -q --data-file=.coverage-data/run .coverage-data
	COVERAGE_RCFILE=$(CURDIR)/pyproject.toml $(BIN)/coverage report --data-file=.coverage-data/run --skip-covered --sort=cover
	COVERAGE_RCFILE=$(CURDIR)/pyproject.toml $(BIN)/coverage html -q --data-file=.coverage-data/run -d htmlcov

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .coverage-data htmlcov
