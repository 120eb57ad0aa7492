# Two entry points: `make run` (plan the embedded default scenario) and `make test`.
# Each creates .venv and installs the project on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DB ?= workbench.duckdb

.PHONY: run test lint clean notebooks

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[test]"
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/workbench --db $(DB) scenario generate seed3 --seed 0
	$(BIN)/workbench --db $(DB) scenario show seed3
	mkdir -p out
	$(BIN)/workbench --db $(DB) plan --scenario seed3 --out out/plan.csv --migrations-out out/migrations.csv
	@echo "Serving the app: open the URL printed below (Ctrl-C stops it)"
	$(BIN)/workbench --db $(DB) serve --port $(or $(PORT),5006)

test: $(STAMP)
	$(BIN)/python -m pytest -q

# JupyterLab on the tutorials (installs the `notebooks` extra on first use).
# FULL_WEEK=1 makes 01_quickstart plan the whole seed3 week instead of two days.
notebooks: $(STAMP)
	$(BIN)/pip install --quiet -e ".[notebooks]"
	WORKBENCH_FULL_WEEK=$(or $(FULL_WEEK),0) \
		$(BIN)/jupyter lab --notebook-dir=notebooks

lint: $(STAMP)
	$(BIN)/ruff check workbench tests apps bench
	$(BIN)/mypy workbench

clean:
	rm -rf $(VENV) $(DB) .pytest_cache
