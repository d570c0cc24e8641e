# The README's commands. Each creates/updates .venv first (idempotent) and says what it is doing.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: install demo test lint services bench clean

install:
	@bash scripts/install.sh

services: install
	@bash scripts/services.sh

demo: install
	@echo "[demo] running the reasoning-rl demo"
	@$(PY) -m reasoning_rl.demo

lint: install
	@echo "[lint] ruff (check + format) + mypy + import contracts (lint-imports)"
	@$(VENV)/bin/ruff check reasoning_rl graders sandboxes tests bench examples
	@$(VENV)/bin/ruff format --check reasoning_rl graders sandboxes tests bench examples
	@$(VENV)/bin/mypy
	@$(VENV)/bin/lint-imports --no-cache

test: services lint
	@echo "[test] running the whole suite (unit + slow + docker + vllm + distributed)"
	@$(PY) -m pytest $(PYTEST_ARGS)

bench: services
	@echo "[bench] running bench/*.py (results -> bench/out/, summary in bench/RESULTS.md)"
	@for b in bench/*.py; do echo "[bench] $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
