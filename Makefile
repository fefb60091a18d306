# Interlock — the two front-door commands: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The npm reference MCP servers the gateway tests run, pinned by this lock file.
NODE_SERVERS := tests/gateways/mcp/npm
NODE_SERVERS_STAMP := $(NODE_SERVERS)/node_modules/.installed

.PHONY: demo test lint typecheck unit test-sanitized test-crewai test-browser-use test-typescript node-servers bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The optional C accelerators of session fingerprints and steps are built by the install
# (ADR 0031, 0032):
# an edit of a source installs again, so the extension in place is never stale.
SPEEDUPS := src/interlock/session/_speedups.c src/interlock/session/_history.c \
	src/interlock/core/_redaction.c src/interlock/store/_chain.c

$(VENV)/.installed-run: pyproject.toml $(SPEEDUPS) | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[langchain]'
	touch $@

$(VENV)/.installed-dev: pyproject.toml $(SPEEDUPS) | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed-run

## demo: create the environment, install Interlock (with LangChain) and run the offline agent demo
demo: $(VENV)/.installed-run
	$(BIN)/interlock demo

## test: create the environment, install dev tools, lint, type-check and run every test
## (CrewAI's and browser-use's adapter tests in environments of their own: they cannot
## share one with the other frameworks; the C accelerators' tests again under sanitizers)
test: $(VENV)/.installed-dev lint typecheck unit test-sanitized test-crewai test-browser-use test-typescript

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy

unit: $(VENV)/.installed-dev node-servers
	$(BIN)/pytest --durations=30

## test-sanitized: the C accelerators built under AddressSanitizer and UndefinedBehaviorSanitizer
## (in build/sanitized) and the tests of their paths run against them (tests/run_sanitized.sh)
test-sanitized: $(VENV)/.installed-dev
	PYTHON=$(BIN)/python tests/run_sanitized.sh

## test-crewai: the CrewAI adapter's tests, in an environment of their own (crewai needs mcp<2)
.venv-crewai/.installed: pyproject.toml $(SPEEDUPS)
	$(PYTHON) -m venv .venv-crewai
	.venv-crewai/bin/python -m pip install --quiet --upgrade pip
	.venv-crewai/bin/python -m pip install --quiet -e '.[crewai,test]'
	touch $@
test-crewai: .venv-crewai/.installed
	.venv-crewai/bin/python -c "import crewai"  # never a silent skip
	.venv-crewai/bin/pytest -q -p no:cacheprovider tests/adapters/test_crewai.py tests/adapters/test_session_inputs_crewai.py

## test-browser-use: the browser-use adapter's tests, in an environment of their own (it pins its dependencies exactly)
.venv-browser-use/.installed: pyproject.toml $(SPEEDUPS)
	$(PYTHON) -m venv .venv-browser-use
	.venv-browser-use/bin/python -m pip install --quiet --upgrade pip
	.venv-browser-use/bin/python -m pip install --quiet -e '.[browser-use,test]'
	touch $@
test-browser-use: .venv-browser-use/.installed
	.venv-browser-use/bin/python -c "import browser_use"  # never a silent skip
	.venv-browser-use/bin/pytest -q -p no:cacheprovider tests/adapters/test_browser_use.py tests/adapters/test_session_inputs_browser_use.py

## test-typescript: the TypeScript client and adapters (clients/typescript): install from its
## lock file, type check, build, check the API types against the server, run its tests
## against a live `interlock serve` of this checkout
test-typescript: $(VENV)/.installed-dev
	@command -v npm >/dev/null 2>&1 || { echo "make: npm (Node 20+) is needed for the TypeScript client's tests"; exit 1; }
	clients/typescript/ci.sh

## node-servers: install the npm reference MCP servers for the gateway tests, where npm is
## (without npm, or when the install fails, those tests are skipped, not failed)
node-servers:
	@if command -v npm >/dev/null 2>&1; then \
	  $(MAKE) -s --no-print-directory $(NODE_SERVERS_STAMP) \
	    || echo "make: the npm reference servers did not install: their tests will be skipped"; \
	else \
	  echo "make: npm not found: the MCP gateway's npm reference-server tests will be skipped"; \
	fi

$(NODE_SERVERS_STAMP): $(NODE_SERVERS)/package-lock.json $(NODE_SERVERS)/package.json
	npm ci --prefix $(NODE_SERVERS) --no-audit --no-fund --loglevel=error
	touch $@

## bench: run the benchmarks (figures go into BENCHMARKS.md)
bench: $(VENV)/.installed-dev
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .venv-crewai .venv-browser-use build/sanitized .pytest_cache .mypy_cache .ruff_cache $(NODE_SERVERS)/node_modules
