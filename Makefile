# joinshift: two commands on a fresh machine.
#   make demo   set up (once) and run the main job on the embedded default
#   make test   set up (once) and run the whole test suite
.PHONY: setup demo test test-fast lint airflow-ui kafka-start kafka-stop bench clean

VENV := .venv/bin

setup:
	@bash build/setup.sh

demo: setup
	$(VENV)/joinshift demo

# two pytest-xdist workers, a test module (and the modules sharing the demo pipeline) per worker
# (tests/conftest.py); each worker has its own Spark driver and broker (~4 GiB). TEST_WORKERS=0: one
# process. (Collection order instead of xdist's most-tests-first measured the same: 17:05 vs 16:52.)
TEST_WORKERS ?= 2

test: setup
	$(VENV)/python -m pytest -q -n $(TEST_WORKERS)

test-fast: setup  ## pure logic only: no broker, no Airflow
	$(VENV)/python -m pytest -q tests/unit

lint: setup  ## ruff (lint + format) and mypy, configured in pyproject.toml
	$(VENV)/ruff check .
	$(VENV)/ruff format --check .
	$(VENV)/mypy

airflow-ui: setup  ## the Airflow UI on http://localhost:8080 against this project's DAGs
	$(VENV)/joinshift airflow standalone

kafka-start: setup
	$(VENV)/joinshift kafka start

kafka-stop: setup
	$(VENV)/joinshift kafka stop

bench: setup
	$(VENV)/python -m bench.streaming_throughput

clean:  ## remove generated data (tables, checkpoints, broker data, logs); keeps caches and .venv
	-$(VENV)/joinshift kafka stop
	rm -rf var
