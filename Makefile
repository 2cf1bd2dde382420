# The two commands of the README:
#   make demo   install, then run the quick-start experiment
#   make test   install, then lint and run the test suite
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test lint bench

install: $(STAMP)

# torch first, pinned: 2.13.0 is the CPU build on a machine without a GPU, and installing
# it before the package keeps the resolver from pulling a multi-GB CUDA build.
$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check torch==2.13.0
	$(PY) -m pip install --quiet --disable-pip-version-check -e ".[dev]"
	touch $(STAMP)

demo: install
	$(VENV)/bin/decent run experiments/quickstart.yaml

lint: install
	$(VENV)/bin/ruff check .

test: lint
	$(PY) -m pytest -q

bench: install
	$(PY) benchmarks/backend_overhead.py
