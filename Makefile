# rankcheck: every target works on a fresh clone. Without NO_VENV it creates
# .venv and installs what is missing; NO_VENV=1 PYTHON=python3 uses the
# interpreter as it is (GPU machines without a package registry).
NO_VENV ?=
SYSTEM_PYTHON ?= python3
# The CPU build of torch that this project's CI machines keep on disk; a GPU
# node overrides it (TORCH_SPEC='torch') or runs with NO_VENV=1.
TORCH_SPEC ?= torch==2.13.0
ifeq ($(NO_VENV),1)
PYTHON ?= python3
VENV_STAMP :=
else
PYTHON := .venv/bin/python
VENV_STAMP := .venv/.installed
endif
XDIST ?= -n auto
# GPU tests share the one GPU four processes at a time; a worker whose context a test ended is replaced (tests/cuda_guard.py);
# tests of one xdist_group (a shared expensive fixture) run on one worker. GPU validation runs after the tests, not
# beside them: a test child's trapped CUDA context, held in the driver's teardown, once stalled a healthy validate job
# in another process past its launch deadline (docs/results/verdicts-under-fire.md, 2026-12-07); pytest ends only once
# every process its tests started has (tests/leftover_processes.py).
GPU_XDIST ?= -n 4 --dist loadgroup
# The kernels the GPU tests compile are the ones validate loads after them (kernels.artifact_cache: keyed by source
# and toolchain), and a second run on the machine reuses them.
GPU_TEST_KERNELS ?= $(CURDIR)/runs/gpu-test-kernels
ARGS ?=

.PHONY: help venv test gpu-test validate golden compile bench list clean

help:
	@echo "make test      CPU test suite (pytest -n auto, no GPU needed)"
	@echo "make validate  the main job: every scenario, launcher picked from the machine"
	@echo "make gpu-test  gpu-marked tests and GPU validation (GPU machine, NO_VENV=1)"
	@echo "make golden    regenerate the stored golden bits on purpose"
	@echo "make compile   compile gate: every kernel variant for sm_90a and sm_100a"
	@echo "make bench     benchmarks (GPU): the default set within 3 minutes (ARGS=--all: every case); JSON, summary and plots under runs/bench/ (ARGS=--out DIR)"

venv: $(VENV_STAMP)

.venv/.installed: pyproject.toml
	$(SYSTEM_PYTHON) -m venv .venv
	.venv/bin/python -m pip install -q --upgrade pip
	.venv/bin/python -m pip install -q "$(TORCH_SPEC)"
	.venv/bin/python -m pip install -q -e '.[dev,kernels]'
	touch $@

test: $(VENV_STAMP)
	$(PYTHON) -m pytest $(XDIST) -m "not gpu" $(ARGS)

# Without a GPU every gpu-marked test would skip and the target would be green having tested nothing.
gpu-test: $(VENV_STAMP)
	@$(PYTHON) -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null || \
		{ echo "make gpu-test: needs a GPU (torch.cuda.is_available() is False for $(PYTHON)); run it on a GPU machine" >&2; exit 1; }
	@mkdir -p runs; \
	RANKCHECK_GPU_TEST_KERNELS=$(GPU_TEST_KERNELS) $(PYTHON) -m pytest -m gpu $(GPU_XDIST) -p no:cacheprovider $(ARGS); tests=$$?; \
	case $$tests in 2|1[0-9][0-9]) echo "make gpu-test: pytest exit $$tests (interrupted or not run): validate not started" >&2; exit $$tests;; esac; \
	RANKCHECK_KERNEL_ARTIFACTS=$(GPU_TEST_KERNELS) $(PYTHON) -m harness validate --launcher auto --junit runs/gpu-validate.xml > runs/gpu-validate.log 2>&1; validated=$$?; \
	cat runs/gpu-validate.log; \
	echo "make gpu-test: pytest exit $$tests, validate exit $$validated (its log: runs/gpu-validate.log)"; \
	[ $$tests -eq 0 ] && [ $$validated -eq 0 ]

validate: $(VENV_STAMP)
	$(PYTHON) -m harness validate --launcher auto $(ARGS)

golden: $(VENV_STAMP)
	$(PYTHON) -m harness golden --regenerate $(ARGS)

compile: $(VENV_STAMP)
	$(PYTHON) -m harness compile --arch sm_90a $(ARGS)
	$(PYTHON) -m harness compile --arch sm_100a $(ARGS)

bench: $(VENV_STAMP)
	$(PYTHON) -m harness bench $(ARGS)

list: $(VENV_STAMP)
	$(PYTHON) -m harness list

clean:
	rm -rf .venv runs .pytest_cache
