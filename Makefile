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

# The main job on the embedded dataset (CPU records of resnet_50, mobilenet_v2, bert_base):
# featurize -> train PAM holding out mobilenet_v2 -> test on it -> export -> tune a MobileNet-V2
# 1x1 conv with the exported model (MoA updates). Every step resumes or overwrites in runs/demo.
DEMO := runs/demo
DEMO_TARGET ?= {"kind": "llvm", "mcpu": "native", "num-cores": 2}
demo: setup
	$(BIN)/python -m data.featurize data/embedded --out $(DEMO)/shards --workers 2
	$(BIN)/python train.py fit --config pam --data.shards $(DEMO)/shards \
	  --data.split hold-out --data.test_networks '[mobilenet_v2]' --trainer.max_epochs 15 \
	  --trainer.logger.init_args.save_dir $(DEMO) --checkpoint.dirpath $(DEMO)/checkpoints \
	  --checkpoint.filename best --checkpoint.enable_version_counter false
	$(BIN)/python train.py test --config pam --data.shards $(DEMO)/shards \
	  --data.split hold-out --data.test_networks '[mobilenet_v2]' --trainer.logger false \
	  --ckpt_path $(DEMO)/checkpoints/best.ckpt
	$(BIN)/python -m bridge.export $(DEMO)/checkpoints/best.ckpt --out $(DEMO)/pam.pt
	$(BIN)/python tune.py --workload conv2d:1,14,14,64,384,1,1,0 \
	  --target '$(DEMO_TARGET)' \
	  --checkpoint $(DEMO)/pam.pt --cost-model pam-siamese-update --trials 32 --trials-per-round 8 \
	  --work-dir $(DEMO)/tune

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# A test that the 300 s timeout ends (setup.cfg) runs once more, and its report, with every thread's
# stack, is printed at the end; one that hangs inside a C call is ended 120 s later, its stacks printed
# (tests/conftest.py). The tests concerned are named once more at the very end. `--dist loadscope`
# keeps a module's tests on one worker, so its shared runs, builders and runners start once
# (19 min 57 s against 21 min 27 s with `load`, docs/benchmarks.md "Tests").
test: setup lint
	rm -rf runs/test-hangs
	$(BIN)/python -m pytest -q -x -n 2 --dist loadscope --durations=15 --reruns 1 --only-rerun 'Timeout \(>' \
	  || { cat runs/test-hangs/*.txt 2>/dev/null; $(HANG_SUMMARY); exit 1; }
	@cat runs/test-hangs/*-timeouts.txt 2>/dev/null || true
	@$(HANG_SUMMARY)

# The tests named in those reports, last, where a log's tail still shows them after the stacks.
HANG_SUMMARY = grep -h -E '^==== |: no answer ' runs/test-hangs/*.txt 2>/dev/null | sed -E 's/^(==== )?/hung or timed out: /' || true

.PHONY: setup demo lint test
