# The README's commands: `make run`, `make check` and `make test`. Everything they need is
# installed here: `make run` the runtime only, `make check` and `make test` add the dev tools
# (linters, browser driver, …).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
RUNTIME := $(VENV)/.installed-runtime
DEV := $(VENV)/.installed-dev
# pytest-xdist workers for make test: the suite waits on servers, subprocesses and timeouts
# as much as it computes, so more workers than cores pay; 4 were no faster than 3 on two
# cores (docs/benchmarks.md, "Test tiers").
WORKERS ?= 3
# pytest with compiled bytecode kept (in .venv, not beside the sources) whatever
# $PYTHONDONTWRITEBYTECODE says: without it every run recompiles skillfs and rewrites every
# test module, in each xdist worker and in each `skillfs` process a test starts. Temporary
# files (SQLite files, etcd's and Redis's data) in memory where /dev/shm is, as etcd's and
# SQLite's fsyncs cost there nothing; only failed tests' directories are kept.
TESTTMP := $(shell test -d /dev/shm -a -w /dev/shm && echo /dev/shm)
# Each lane of make test has a base directory of its own (--basetemp): pytest's numbered
# directories keep only the 3 newest sessions of a user, so lanes and other runs starting
# sessions beside a long one deleted its files under it.
TESTROOT := $(or $(TESTTMP),/tmp)
PYTEST := env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=$(abspath $(VENV))/pycache \
	$(if $(TESTTMP),TMPDIR=$(TESTTMP)) $(BIN)/pytest -o tmp_path_retention_policy=failed

.PHONY: run check test lint servers proto console-assets clean

$(RUNTIME): pyproject.toml
	@echo "installing skillfs into $(VENV) (the first run takes about a minute)"
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
	touch $(RUNTIME)

$(DEV): $(RUNTIME)
	@echo "installing the test tools into $(VENV)"
	$(BIN)/pip install -q -e '.[dev]'
	touch $(DEV)

# Debian's servers for the real-store tests (PostgreSQL's binaries are under
# /usr/lib/postgresql/*/bin, not on PATH; support/postgres.py runs its own server) and chromium for the console's browser tests;
# installed only when missing.
servers:
	@missing=""; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	command -v redis-sentinel >/dev/null || missing="$$missing redis-sentinel"; \
	command -v etcd >/dev/null || missing="$$missing etcd-server etcd-client"; \
	ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || missing="$$missing postgresql"; \
	test -x /usr/bin/chromium || missing="$$missing chromium"; \
	command -v openssl >/dev/null || missing="$$missing openssl"; \
	if [ -n "$$missing" ]; then \
		echo "installing$$missing from Debian"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

run: $(RUNTIME)
	$(BIN)/skillfs run

# Regenerate skillfs/remote/proto/ from protos/skillfs/v1/ (tests/test_grpc_proto.py checks it is current).
proto: $(DEV)
	$(BIN)/python protos/generate.py

# Rebuild the console's editor, skillfs/console/static/editor.js and its licence notices, from
# console/assets/ (CodeMirror 6 at the versions of its package-lock.json, bundled by esbuild;
# needs node and npm). The bundle is committed; tests/console/test_console_assets.py checks it
# was built from the lock and source beside it.
console-assets:
	cd console/assets && npm ci --no-audit --no-fund && node build.mjs

LINT = $(BIN)/ruff check . && $(BIN)/mypy skillfs
lint: $(DEV)
	$(LINT)

# The fast lane, while working: lint, then tests/unit, tests/store and tests/governance on
# memory and SQLite. --no-servers deselects every test marked `server` and fails any test that
# starts one anyway; no browser either (those tests are in tests/console).
check: lint
	$(PYTEST) -q --no-servers tests/unit tests/store tests/governance

# The whole suite, as CI runs it, in two lanes side by side. The side lane: lint, then the
# tests marked `serial` (they hold wall-clock time to tight bounds: servers counting runs
# against the clock, a stopped store within a step's budget), one at a time, collected from
# the files that mark any. The main lane: every other test with pytest-xdist, niced to 19 so
# that a serial test and its servers get the CPU when they want it. Each lane has its own
# half of the port range; the side lane's report is printed after the main one's. A lane
# that selects no test (pytest's status 5) is no failure there. (Before, the serial tests of
# tests/scenarios ran alone after both, and lint before everything: 1.5 min more on 2 cores;
# docs/benchmarks.md, "Test tiers".)
SERIAL_FILES = $$(grep -rl --include='test_*.py' 'mark.serial' tests)
test: $(DEV) servers
	@side=$$(mktemp -d); status=0; runs=$$(mktemp -d $(TESTROOT)/skillfs-tests.XXXXXX); \
	( { echo "---- lint"; $(LINT); echo $$? >$$side/lint; \
	    echo "---- the serial tests"; \
	    SKILLFS_TEST_PORTS=1/2 $(PYTEST) -q -m serial --durations=10 --basetemp=$$runs/serial $(SERIAL_FILES); \
	    echo $$? >$$side/serial; } >$$side/log 2>&1 ) & \
	SKILLFS_TEST_PORTS=0/2 nice -n 19 $(PYTEST) -q -n $(WORKERS) --dist load --durations=30 \
		--basetemp=$$runs/parallel -m "not serial" || status=$$?; \
	wait; cat $$side/log; \
	rc=$$(cat $$side/lint); [ $$rc -eq 0 ] || status=$$rc; \
	rc=$$(cat $$side/serial); [ $$rc -eq 0 ] || [ $$rc -eq 5 ] || status=$$rc; \
	rm -rf $$side; \
	if [ $$status -eq 0 ]; then rm -rf $$runs; else echo "failed tests' files: $$runs"; fi; \
	exit $$status

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
