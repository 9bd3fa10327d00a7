# Two entry points that set everything up on a fresh machine (Python 3.10+ with venv):
#   make demo   -> the main job on the embedded CPU dataset
#   make test   -> the test suite
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
export TVM_NUM_THREADS ?= 2
export WANDB_MODE ?= offline

$(BIN)/activate:
	$(PY) -m venv $(VENV)

$(VENV)/.installed: $(BIN)/activate setup.cfg pyproject.toml
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[dev]"
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(BIN)/python -m data.demo --work-dir runs/demo

test: setup
	$(BIN)/python -m pytest -q -x --durations=15

.PHONY: setup demo test
