# Two entry points for a fresh machine: `make run` and `make test`.
# Both create the virtual environment from the committed lock when it is missing or stale.

VENV        := .venv
BIN         := $(VENV)/bin
STAMP       := $(VENV)/.installed
PIP_TOOLS   := pip==24.2 setuptools==84.2.1 wheel==0.48.0
PYTEST_ARGS ?=

.PHONY: run test test-fast lint data benchmark lock clean venv

venv: $(STAMP)

$(STAMP): setup.py pyproject.toml constraints.txt
	@test -x $(BIN)/python || $$(scripts/find-python3.10) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check $(PIP_TOOLS)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[test]"
	@touch $@

run: $(STAMP)
	$(BIN)/taxi-pipeline run

test: lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: lint
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check pipeline components tests benchmarks setup.py

data: $(STAMP)
	$(BIN)/taxi-pipeline make-data

benchmark: $(STAMP)
	$(BIN)/python benchmarks/pipeline_wall_time.py

lock: $(STAMP)
	@{ echo "# Complete lock of the Python 3.10 environment (pip freeze of a working install)."; \
	   echo "# Regenerate with: make lock"; \
	   $(BIN)/python -m pip freeze --exclude-editable; } > constraints.txt

clean:
	rm -rf tfx_pipeline_output serving_model/*/
