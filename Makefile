# The README's two commands: `make compare` and `make test`.
# Both create .venv and install pinned versions (constraints.txt) when needed.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXTRAS ?= torch,jax,tf-cpu,dev,docs

.PHONY: install test compare lint transfer reference dist docs clean

$(STAMP): pyproject.toml constraints.txt
	@echo "looptoolkit: setting up $(VENV) with the pinned versions of constraints.txt (a few minutes the first time)"
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@echo "looptoolkit: [1/3] pip"
	@$(BIN)/python -m pip install -q --upgrade pip
	@# torch first, pinned: it resolves to the CPU build here and keeps pip
	@# from pulling a CUDA build for tensordict's dependency.
	@echo "looptoolkit: [2/3] torch (pinned CPU build)"
	@$(BIN)/python -m pip install -q -c constraints.txt torch
	@echo "looptoolkit: [3/3] looptoolkit with [$(EXTRAS)]: jax, tensorflow-cpu, tensordict, test and docs tools"
	@$(BIN)/python -m pip install -q -c constraints.txt -e ".[$(EXTRAS)]"
	@touch $(STAMP)
	@echo "looptoolkit: $(VENV) is ready"

install: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

# Results go to ./looptoolkit-results/ (ignored by git); `make reference` rewrites
# the committed reference results under benchmarks/results/ on purpose.
compare: $(STAMP)
	$(BIN)/looptoolkit compare $(ARGS)

transfer: $(STAMP)
	$(BIN)/looptoolkit transfer $(ARGS)

reference: $(STAMP)
	$(BIN)/looptoolkit compare --reference --rounds 9 $(ARGS)
	$(BIN)/looptoolkit transfer --reference

lint: $(STAMP)
	$(BIN)/ruff check looptoolkit tests benchmarks docs/hooks.py
	$(BIN)/ruff format --check looptoolkit tests benchmarks docs/hooks.py
	$(BIN)/mypy

# The release check: build the sdist and the wheel, `twine check` both, install
# the wheel in a fresh venv with only the core dependencies (NumPy, optree) and
# run `import looptoolkit` and the README's tour there.
DISTVENV := .venv-dist
dist: $(STAMP)
	rm -rf dist $(DISTVENV)
	$(BIN)/python -m build --outdir dist .
	$(BIN)/twine check --strict dist/*
	$(PY) -m venv $(DISTVENV)
	$(DISTVENV)/bin/python -m pip install -q -c constraints.txt dist/*.whl
	cd /tmp && $(CURDIR)/$(DISTVENV)/bin/python -c "import looptoolkit; print(looptoolkit.__version__)"
	cd /tmp && $(CURDIR)/$(DISTVENV)/bin/python $(CURDIR)/tests/readme_tour.py $(CURDIR)/README.md

# The documentation site, into site/: every warning (a broken link or anchor, an
# unresolved cross-reference, a docstring problem) fails the build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) $(DISTVENV) dist build site .pytest_cache .mypy_cache .ruff_cache
