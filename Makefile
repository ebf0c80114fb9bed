# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEV_STAMP := $(VENV)/.dev-installed
VLLM_VERSION := 0.27.1

.PHONY: test demo bench lint clean

$(DEV_STAMP): pyproject.toml requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt -e .
	touch $@

## make test: the whole CPU test suite (real vLLM wheels are downloaded and cached)
test: $(DEV_STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

## make demo: a throwaway venv with vLLM 0.27.1 (no deps), then apply and check
demo:
	@set -e; demo=$$(mktemp -d); trap 'rm -rf "$$demo"' EXIT; \
	echo "== throwaway venv in $$demo"; \
	$(PYTHON) -m venv "$$demo/venv"; \
	"$$demo/venv/bin/python" -m pip install --quiet --no-deps vllm==$(VLLM_VERSION); \
	"$$demo/venv/bin/python" -m pip install --quiet .; \
	echo "== dflash2-backport check (before: exit 1 means edits are pending)"; \
	"$$demo/venv/bin/dflash2-backport" check || test $$? -eq 1; \
	echo "== dflash2-backport apply"; \
	"$$demo/venv/bin/dflash2-backport" apply; \
	echo "== dflash2-backport check (after: must exit 0)"; \
	"$$demo/venv/bin/dflash2-backport" check; \
	echo "== demo passed: vLLM $(VLLM_VERSION) patched, a second check finds nothing to do"

## make bench: check/apply wall time against a bare libcst parse of the seven files
bench: $(DEV_STAMP)
	$(BIN)/python scripts/bench.py

lint: $(DEV_STAMP)
	$(BIN)/ruff check dflash2_backport transforms tests scripts

clean:
	rm -rf $(VENV) build dist *.egg-info
