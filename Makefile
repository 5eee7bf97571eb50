# The README's two commands: `make train` and `make test`. Both create the virtualenv when it is
# missing and (re)install when setup.cfg/pyproject.toml changed. VENV may point elsewhere
# (CI keeps one per requirements hash outside the clone).
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
STAMP := $(VENV)/.sporeflow-installed
PYTEST_ARGS ?=

.PHONY: install train test test-fast test-slow lint format bench docs docs-serve docs-examples clean help

help:
	@echo "make train   - install if needed, then run the default job (python train.py)"
	@echo "make test    - install if needed, then run the whole test suite on 2 cores (what CI runs)"
	@echo "make test-fast - all but the tests marked slow; make test-slow - only those"
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

# `make test` runs the whole suite on both cores (pytest-xdist): a test file per worker at a
# time, so that a module's shared runs are made once, the longest files first
# (tests/helpers/ordering.py; --no-loadscope-reorder keeps that order) so that both workers end
# together. `make test-fast` leaves out the tests marked slow (about a minute each or more:
# msrun jobs, sweeps, a SLURM cluster); `make test-slow` runs only those.
PYTEST := $(RUN) -m pytest
PARALLEL ?= -n 2 --dist loadfile --no-loadscope-reorder

test: install
	$(PYTEST) $(PARALLEL) $(PYTEST_ARGS)

test-fast: install
	$(PYTEST) -m "not slow" $(PARALLEL) $(PYTEST_ARGS)

test-slow: install
	$(PYTEST) -m slow $(PARALLEL) $(PYTEST_ARGS)

# mypy checks the layers below config (they import no Hydra): the ones most code stands on
TYPED := src/sporeflow/core src/sporeflow/storage src/sporeflow/engine src/sporeflow/dim_reduce src/sporeflow/tracking

lint: install
	$(RUN) -m ruff check .
	$(RUN) -m ruff format --check .
	$(RUN) -m mypy $(TYPED)

format: install
	$(RUN) -m ruff format .
	$(RUN) -m ruff check --fix .

docs-examples: install
	$(RUN) docs/make_examples.py

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

docs-serve: install
	NO_MKDOCS_2_WARNING=1 $(MKDOCS) serve --dev-addr 127.0.0.1:8000
