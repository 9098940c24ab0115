# The README's two commands: `make run` and `make test`. Everything they need is installed here:
# `make run` the runtime only, `make test` adds the dev tools (linters, browser driver, …).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
RUNTIME := $(VENV)/.installed-runtime
DEV := $(VENV)/.installed-dev

.PHONY: run test lint servers proto clean

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

# Debian's servers for the real-store tests and chromium for the console's browser tests;
# installed only when missing.
servers:
	@missing=""; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	command -v redis-sentinel >/dev/null || missing="$$missing redis-sentinel"; \
	command -v etcd >/dev/null || missing="$$missing etcd-server etcd-client"; \
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

lint: $(DEV)
	$(BIN)/ruff check .
	$(BIN)/mypy skillfs

test: $(DEV) servers lint
	$(BIN)/pytest -q

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
