# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEV_STAMP := $(VENV)/.dev-installed
VLLM_VERSION := 0.27.1
# The tests' downloads: vLLM wheels, their extracted trees and the runtime
# venvs (docs/development.md gives its size); share one directory between
# checkouts by exporting it. DFLASH2_BACKPORT_CACHE is its earlier name.
DFLASH2_BACKPORT_TEST_CACHE ?= $(or $(DFLASH2_BACKPORT_CACHE),$(CURDIR)/.cache/dflash2-backport)
export DFLASH2_BACKPORT_TEST_CACHE

# Worker processes for the suite (pytest-xdist): one per core by default.
# PYTEST_WORKERS=0 runs it in this one process.
PYTEST_WORKERS ?= auto
PYTEST_PARALLEL := -n $(PYTEST_WORKERS) --dist loadfile

.PHONY: test test-quick demo bench bench-verify lint clean

$(DEV_STAMP): pyproject.toml requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt -e .
	touch $@

## make test: the whole CPU test suite (docs/development.md says how long it takes)
test: $(DEV_STAMP)
	$(BIN)/python -m pytest $(PYTEST_PARALLEL) $(PYTEST_ARGS)

## make test-quick: everything but the runtime tests (real vLLM in fresh interpreters),
## the fault tests (real subprocesses killed, signalled and raced at every write),
## the install tests (venvs built and filled by pip, uv or pre-commit) and the
## drift suite's variant trees (each judged, applied and rewritten whole)
test-quick: $(DEV_STAMP)
	$(BIN)/python -m pytest $(PYTEST_PARALLEL) -m "not runtime and not faults and not installs and not variants" $(PYTEST_ARGS)

## make demo: the tool in one throwaway venv, vLLM 0.27.1 (no deps) in another.
## Everything it writes stays in its temporary directory: the tool is built
## from a copy of the sources, and pip's cache, the verdict cache and any
## other XDG cache go there too.
demo:
	@set -e; demo=$$(mktemp -d); trap 'rm -rf "$$demo"' EXIT; \
	export XDG_CACHE_HOME="$$demo/cache" TMPDIR="$$demo/tmp" \
	    DFLASH2_BACKPORT_VERDICT_CACHE="$$demo/cache/verdicts"; mkdir "$$TMPDIR"; \
	wheel=$$(ls "$(DFLASH2_BACKPORT_TEST_CACHE)"/wheels/vllm-$(VLLM_VERSION)-*.whl 2>/dev/null | head -n 1); \
	echo "== two throwaway venvs in $$demo: tool/ and vllm/"; \
	mkdir "$$demo/src"; cp -R pyproject.toml README.md LICENSE dflash2_backport transforms modules "$$demo/src"; \
	$(PYTHON) -m venv "$$demo/tool"; \
	$(PYTHON) -m venv "$$demo/vllm"; \
	"$$demo/tool/bin/python" -m pip install --quiet --disable-pip-version-check "$$demo/src"; \
	"$$demo/vllm/bin/python" -m pip install --quiet --disable-pip-version-check \
	    --no-deps --no-warn-conflicts "$${wheel:-vllm==$(VLLM_VERSION)}"; \
	tool="$$demo/tool/bin/dflash2-backport"; python="$$demo/vllm/bin/python"; \
	"$$tool" --version; \
	echo "== dflash2-backport check --python \$$python (exit 1: edits are pending)"; \
	"$$tool" check --python "$$python" || test $$? -eq 1; \
	echo "== dflash2-backport apply --python \$$python"; \
	"$$tool" apply --python "$$python"; \
	echo "== dflash2-backport check --python \$$python (must exit 0)"; \
	"$$tool" check --python "$$python"; \
	echo "== demo passed: vLLM $(VLLM_VERSION) patched from another venv; a second check finds nothing to do"; \
	echo "   (\`verify\` needs torch beside vLLM: see README, Checking it runs)"

## make bench: check/apply wall time against a bare libcst parse of the target files,
## then a warm check's start-up with typer 0.28 and with the newest
bench: $(DEV_STAMP)
	$(BIN)/python scripts/bench.py

## make bench-verify: wall time of `verify` on the runtime venvs (CPU and CUDA torch)
bench-verify: $(DEV_STAMP)
	$(BIN)/python scripts/bench_verify.py

## make lint: ruff on the tool, codemods, tests and scripts (CI runs it)
lint: $(DEV_STAMP)
	$(BIN)/ruff check dflash2_backport transforms tests scripts

clean:
	rm -rf $(VENV) build dist *.egg-info
