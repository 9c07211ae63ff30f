# The two commands a newcomer needs: `make demo` and `make test`.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: test demo tour lint clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

## test: the whole suite, on SQLite and PostgreSQL (a bundled server starts when none answers)
test: $(BIN)/.installed
	$(BIN)/ruff check src tests
	$(BIN)/lint-imports --no-cache
	$(BIN)/pytest $(PYTEST_ARGS)

## demo: the weekly digest story with worker processes and a crash, on a throw-away SQLite file
demo: $(BIN)/.installed
	$(BIN)/jobledger demo

## tour: the README's five-minute tour, on a throw-away SQLite file
tour: $(BIN)/.installed
	$(BIN)/python examples/quick_tour.py

## lint: style, types and layer contracts
lint: $(BIN)/.installed
	$(BIN)/ruff check src tests
	$(BIN)/lint-imports

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
