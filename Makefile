# Two entry points for a fresh machine: `make run` and `make test-all-stacks` (what CI runs).
#
# Two stacks, each with a complete lock in locks/ (see scripts/stack):
#   tfx-1.21  TFX 1.21, TensorFlow 2.21, Keras 3, Python 3.13 (needs glibc >= 2.39)
#   tfx-1.16  TFX 1.16, TensorFlow 2.16, Keras 2, Python 3.10
# `make` picks the newest one this machine loads and says which; `make STACK=tfx-1.16 ...`
# forces one. Each stack has its own virtual environment, .venv-<stack>, created from its
# lock when missing or stale; .venv points at the one `make` picked.
# `make test-all-stacks` also runs the other stack's stack-dependent tests (SUITE below), in
# a Debian 13 root (scripts/debian-root) when this machine cannot load it, then both images.

STACKS      := $(shell scripts/stack list)
STACK       := $(or $(STACK),$(shell scripts/stack pick 2>/dev/null))
VENV        := .venv-$(STACK)
BIN         := $(VENV)/bin
STAMP       := $(VENV)/.installed
LOCK        := locks/$(STACK).txt
PIP_TOOLS   := $(shell grep == locks/pip-tools.txt)
PYTEST_ARGS ?=
# Also for the other stack's suite in test-all-stacks (through the environment).
export PYTEST_ARGS

# No stack, or an unknown one: stop before anything is installed, saying why.
ifneq ($(MAKECMDGOALS),clean)
ifeq ($(STACK),)
$(error $(shell scripts/stack pick 2>&1 >/dev/null))
endif
ifeq ($(filter $(STACK),$(STACKS)),)
$(error unknown stack '$(STACK)'; the stacks are: $(STACKS))
endif
endif

.PHONY: run test test-fast bytecode test-all-stacks test-image image-tests image lint data benchmark bench-scale bench-soak lock clean venv stack test-tools

# One line naming the stack; fails, saying why, when the machine cannot load it. Points
# .venv at its environment (not inside the Debian root, and never over a real folder).
stack:
	@scripts/stack describe $(STACK)
	@if [ -z "$$TAXI_STACK_ROOT" ]; then \
	  if [ -L .venv ] || [ ! -e .venv ]; then ln -sfn $(VENV) .venv; \
	  else echo "note: .venv is a folder of an older layout; $(VENV) is the environment now (remove .venv to link it)"; fi; \
	fi

venv: $(STAMP)

# A copy of the lock's environment, cached once per lock (scripts/venv), with this package.
$(STAMP): setup.py $(LOCK) locks/pip-tools.txt | stack
	scripts/venv $(STACK) $(VENV) $(PIP_TOOLS)

run: $(STAMP)
	$(BIN)/taxi-pipeline run

# SUITE=all (the default) or every-stack: what test-all-stacks runs on the other stacks,
# every test not marked slow and the slow ones marked every_stack (docs/testing.md says
# which and why).
SUITE ?= all
ifeq ($(filter $(SUITE),all every-stack),)
$(error unknown SUITE '$(SUITE)'; give all or every-stack)
endif
# The every-stack part runs on three workers, the rest on two (pyproject.toml): many of its
# tests wait (the watch's silence thresholds, Cloud Storage's bounds), and on two workers
# the CPUs sat 17 % idle there; the whole suite keeps two busy until its last minutes, and
# a third only shared them (docs/testing.md). A -n in PYTEST_ARGS, given after, still decides.
SUITE_ARGS := $(if $(filter every-stack,$(SUITE)),-m "not slow or every_stack" -n 3)
test: lint test-tools bytecode
	$(BIN)/python -m pytest $(SUITE_ARGS) $(PYTEST_ARGS)

# The package's bytecode, written before a suite: where PYTHONDONTWRITEBYTECODE is set
# (CI's machine sets it), each of the few hundred processes a suite starts would compile
# the package again (docs/testing.md, "What CI's time goes to").
bytecode: $(STAMP)
	@$(BIN)/python -m compileall -q -j 0 pipeline components tests benchmarks

# Tests use real tools, not stand-ins: Debian's chromium renders the run page
# (tests/test_operations.py) and a MariaDB server holds MLMD (tests/test_metadata_mysql.py).
# Installed here when missing, where apt-get can (as root; inside the Debian 13 root too),
# one apt-get at a time (test-all-stacks may run this for two stacks at once).
TEST_TOOLS := chromium:chromium mariadbd:mariadb-server
test-tools:
	@missing=""; for pair in $(TEST_TOOLS); do \
	  PATH="$$PATH:/usr/sbin:/sbin" command -v $${pair%%:*} >/dev/null 2>&1 || missing="$$missing $${pair#*:}"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "Installing Debian's$$missing for the tests."; \
	    flock /tmp/taxi-pipeline-apt.lock sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	      apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends "$$@" >/dev/null' sh $$missing; \
	  else echo "note: missing$$missing and no apt-get as root: the tests that use them will fail"; fi; fi

test-fast: lint bytecode
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

# This stack's whole suite, then every other stack's stack-dependent part (SUITE=every-stack),
# each where it loads, then the compiled pipeline in each stack's image (test-image).
# Meanwhile, at the lowest CPU and disk priority, into .background-build.log: the other
# stacks' environments (and the Debian 13 root they may run in), then the images (copied
# from the environments: scripts/image-venv) and the emulator. The tools the builds install
# come first, then the background starts beside this stack's environment and the suite: on a
# machine with cold caches that is about half an hour of mmdebstrap, pip, the images' layers
# and go the later phases would otherwise wait for; with warm ones a minute or two.
# `scripts/venv` holds a lock on each environment, so a phase that reaches one still being
# made waits for it.
OTHER_STACKS := $(filter-out $(STACK),$(STACKS))
test-all-stacks: | stack
	@scripts/image tools
	@scripts/gcs-emulator --check
	@scripts/loopback-only true
	@setsid nice -n 19 ionice -c 3 sh -c 'for other in $(OTHER_STACKS); do \
	    scripts/stack run $$other $(MAKE) --no-print-directory STACK=$$other venv test-tools || exit $$?; done; \
	  $(MAKE) --no-print-directory venv image && scripts/gcs-emulator' \
	    > .background-build.log 2>&1 & build=$$!; \
	trap 'kill -- -$$build 2>/dev/null' EXIT; \
	$(MAKE) --no-print-directory test || exit $$?; \
	for other in $(OTHER_STACKS); do \
	  scripts/stack run $$other $(MAKE) --no-print-directory STACK=$$other SUITE=every-stack test || exit $$?; \
	done; \
	wait $$build || { tail -n 20 .background-build.log; echo "error: building the other stacks, the images \
	or the emulator failed (the lines above, all of it in .background-build.log)" >&2; exit 2; }; \
	trap - EXIT; \
	$(MAKE) --no-print-directory image-tests

# The pipeline image (Dockerfile) of each stack, built with buildah (no Docker daemon) on a
# base made by mmdebstrap from Debian's packages (scripts/image); both installed with
# apt-get when missing. Layers are cached: a re-build with the same lock rebuilds only the
# package. The first stack's image runs every image test, the second's the schedule's
# jobs the other way round: its first two on Kubeflow Pipelines and the rest on Vertex AI
# (tests/image/test_vertex_other_stack.py).
IMAGE_STACKS ?= tfx-1.21 tfx-1.16
IMAGE_REPO   := localhost/taxi-pipeline
image:
	@for stack in $(IMAGE_STACKS); do scripts/image build $$stack || exit $$?; done

# The compiled pipeline run as Vertex AI runs it, each task in an image, on `gs://` paths
# served by a Cloud Storage emulator built once from the Go module proxy (tests/image), in
# a network namespace whose one interface is loopback (scripts/loopback-only).
# `image-tests` runs them on the images as they are (test-all-stacks has just built them:
# a re-build with every layer cached still takes a minute and a half per image).
test-image: $(STAMP) image
	@$(MAKE) --no-print-directory image-tests

image-tests: $(STAMP)
	@emulator=$$(scripts/gcs-emulator) && set -- $(IMAGE_STACKS) && \
	TAXI_GCS_EMULATOR=$$emulator TAXI_PIPELINE_IMAGE=$(IMAGE_REPO):$$1 \
	TAXI_OTHER_STACK_IMAGE=$${2:+$(IMAGE_REPO):$$2} scripts/loopback-only $(BIN)/python -m pytest tests/image $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check pipeline components tests benchmarks setup.py

data: $(STAMP)
	$(BIN)/taxi-pipeline make-data

benchmark: $(STAMP)
	$(BIN)/python benchmarks/pipeline_wall_time.py

# Time and peak memory of cold runs at 100k, 1M, 5M and 10M rows, and three alternating pairs
# with TFX's own example at 1M rows (the median ratio is the goal of docs/scale.md):
# writes docs/scale.md and docs/scale.png. Outside `make test`: 35-60 minutes on 2 cores.
bench-scale: $(STAMP)
	$(BIN)/python benchmarks/scale.py

# A year of weekly retrains on one output root, retention on, with bad spans and kills:
# writes docs/soak.md and docs/soak.png. Outside `make test`: about an hour on 2 cores.
bench-soak: $(STAMP)
	$(BIN)/python benchmarks/soak.py --markdown docs/soak.md --json docs/soak.json

# Written aside, then renamed: a failed freeze leaves the lock as it was.
lock: $(STAMP)
	@{ echo "# Complete lock of the $(STACK) stack (pip freeze of a working install)."; \
	   echo "# Regenerate with: make STACK=$(STACK) lock (tfx-1.21 on an older system: scripts/debian-root run make STACK=tfx-1.21 lock)"; \
	   $(BIN)/python -m pip freeze --exclude-editable 2>/dev/null; } > $(LOCK).tmp && mv $(LOCK).tmp $(LOCK)

clean:
	rm -rf tfx_pipeline_output serving_model/*/
