# The README's two commands: `make demo` (the main job) and `make test`.
PYTHON ?= python3
export LITELLM_LOCAL_MODEL_COST_MAP := True

.PHONY: install demo test bench

install:
	$(PYTHON) -m pip install -q -e ".[collector,dev]"

demo: install
	$(PYTHON) -m collector.cli demo --degrade-after 90

test: install
	$(PYTHON) -m pytest -q

bench: install
	$(PYTHON) bench/sdk_overhead.py
	$(PYTHON) bench/collector_ingest.py
	$(PYTHON) bench/judge_cost.py --rows 50
	$(PYTHON) bench/scale_out.py
	$(PYTHON) scripts/eval_local_judge.py
