# The README's commands: `make train`, `make test` (and CI's `make test-all`). Each creates the
# virtualenv when it is missing and (re)installs when setup.cfg/pyproject.toml changed. VENV may
# point elsewhere (CI keeps one per requirements hash outside the clone).
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
STAMP := $(VENV)/.sporeflow-installed
PYTEST_ARGS ?=

.PHONY: install train test test-e2e test-all lint format bench docs docs-serve docs-examples clean help

help:
	@echo "make train   - install if needed, then run the default job (python train.py)"
	@echo "make test    - install if needed, then the in-process tier (tests/unit) on 2 cores: run it on every change"
	@echo "make test-e2e - the process tier (tests/e2e: msrun, signals, servers, SLURM, the browser)"
	@echo "make test-all - both tiers in one run on 2 cores (what CI runs)"
	@echo "make lint    - ruff (lint and format check) and mypy on the lower layers; CI runs it first"
	@echo "make format  - ruff format and ruff's safe fixes, in place"
	@echo "make bench   - run the benchmarks in bench/ (print figures, not tests)"
	@echo "make docs    - build the manual (docs/, mkdocs --strict) into site/; make docs-serve serves it on 127.0.0.1:8000"
	@echo "make docs-examples - rerun the example commands of the manual and put their output in its pages (~4 min)"
	@echo "make clean   - remove outputs/, multirun/ runs, the MLflow store (mlflow.db, mlartifacts/), the Optuna study (optuna.db), locks"

$(STAMP): setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,team,docs]'
	touch $(STAMP)

install: $(STAMP)
	@# a reused venv may point its editable install at another checkout: re-point, no deps
	$(PY) -m pip install --quiet --no-deps -e .

# the venv's python with the venv's bin first on PATH (msrun, mlflow)
RUN := PATH="$(abspath $(VENV))/bin:$$PATH" $(PY)

train: install
	$(RUN) train.py $(ARGS)

# Two tiers (docs/testing.md). `make test` is the in-process tier (tests/unit: whole jobs run in
# the test process, minutes), the one to run on every change; `make test-e2e` the process tier
# (tests/e2e: msrun workers, signals, servers, namespaces, SLURM, the browser: half an hour);
# `make test-all` runs both in one pytest run, so the two workers stay busy to the end: what CI
# runs. Each spreads the files over both cores (pytest-xdist): a test file per worker at a time,
# so that a module's shared runs are made once, the longest files first (tests/helpers/ordering.py;
# --no-loadscope-reorder keeps that order) so that both workers end together.
PYTEST := $(RUN) -m pytest
PARALLEL ?= -n 2 --dist loadfile --no-loadscope-reorder

test: install
	$(PYTEST) $(PARALLEL) tests/unit $(PYTEST_ARGS)

test-e2e: install
	$(PYTEST) $(PARALLEL) tests/e2e $(PYTEST_ARGS)

test-all: install
	$(PYTEST) $(PARALLEL) $(PYTEST_ARGS)

# mypy checks the layers most code stands on: config, and job + stage (they read the typed job plan)
TYPED := src/sporeflow/core src/sporeflow/storage src/sporeflow/engine src/sporeflow/dim_reduce src/sporeflow/tracking src/sporeflow/config src/sporeflow/job src/sporeflow/stage

lint: install
	$(RUN) -m ruff check .
	$(RUN) -m ruff format --check .
	$(RUN) -m mypy $(TYPED)

format: install
	$(RUN) -m ruff format .
	$(RUN) -m ruff check --fix .

docs-examples: install
	$(RUN) docs/make_examples.py $(ARGS)

bench: install
	@for b in bench/bench_*.py; do echo "== $$b"; $(RUN) $$b || exit 1; done

clean:
	rm -rf outputs mlflow.db mlflow.db.lock optuna.db mlartifacts .sporeflow .pytest_cache
	find multirun -mindepth 1 ! -name .gitkeep -exec rm -rf {} +

# The manual: mkdocs-material over docs/ (mkdocs.yml); --strict makes a broken link, a page
# missing from the nav or a failing reference an error, as in CI.
MKDOCS := $(RUN) -m mkdocs
docs: install
	NO_MKDOCS_2_WARNING=1 $(MKDOCS) build --strict --site-dir site
	@echo "the manual: $(CURDIR)/site/index.html (opens from files; make docs-serve serves it)"

docs-serve: install
	NO_MKDOCS_2_WARNING=1 $(MKDOCS) serve --dev-addr 127.0.0.1:8000
