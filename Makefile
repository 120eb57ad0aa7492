# Two entry points: `make run` (plan the embedded default scenario) and `make test`.
# Each creates .venv and installs the project on first use, at the tested versions of
# constraints.txt (`make lock` refreshes them and reruns the suite; `make test-fast` is the
# edit-test loop's subset).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DB ?= workbench.duckdb

LOCK := constraints.txt

.PHONY: run test test-fast lint clean notebooks notebooks-run lock

$(STAMP): pyproject.toml $(LOCK)
	@echo "== Installing the workbench and its dependencies into $(VENV) (first use: 1-2 minutes)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --progress-bar on -c $(LOCK) -e ".[test]"
	@echo "== Installed; next time this step is skipped"
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

# The quick loop: the tests not marked slow (under two minutes on two busy cores).
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

# Refresh the tested versions: a fresh .venv at the newest versions pyproject.toml's ranges
# allow, constraints.txt rewritten from it, then the whole suite on them. Commit
# constraints.txt only when the suite passes.
lock:
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[test]"
	{ sed -n '/^#/p' $(LOCK); $(BIN)/pip freeze --exclude-editable; } > $(LOCK).new
	sed -i "s/^# Python .*/# Python $$($(BIN)/python -c 'import platform; print(platform.python_version())'), $$(uname -m) Linux./" $(LOCK).new
	mv $(LOCK).new $(LOCK)
	touch $(STAMP)
	$(BIN)/python -m pytest -q

# JupyterLab on the tutorials (installs the `notebooks` extra on first use).
# FULL_WEEK=1 makes 01_quickstart and 04_grid_flexibility plan the whole seed3 week instead
# of two days.
notebooks: $(STAMP)
	@echo "== Installing the notebooks extra (JupyterLab)"
	$(BIN)/pip install --progress-bar on -c $(LOCK) -e ".[notebooks]"
	WORKBENCH_FULL_WEEK=$(or $(FULL_WEEK),0) \
		$(BIN)/jupyter lab --notebook-dir=notebooks

# The tutorials run headless, top to bottom, as CI runs them: each executed notebook is
# written to out/notebooks/ (the sources stay as they are).
notebooks-run: $(STAMP)
	@echo "== Installing the notebooks extra (nbclient, ipykernel)"
	$(BIN)/pip install --progress-bar on -c $(LOCK) -e ".[notebooks]"
	mkdir -p out/notebooks
	for nb in notebooks/*.ipynb; do \
		echo "== running $$nb"; \
		WORKBENCH_FULL_WEEK=$(or $(FULL_WEEK),0) $(BIN)/jupyter nbconvert --to notebook \
			--execute --ExecutePreprocessor.timeout=1800 \
			--output-dir out/notebooks "$$nb" || exit 1; \
	done

lint: $(STAMP)
	$(BIN)/ruff check workbench tests apps bench
	$(BIN)/mypy workbench

clean:
	rm -rf $(VENV) $(DB) .pytest_cache
