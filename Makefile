# Every target creates or reuses the virtual environment .venv and installs into it, from the lock
# files in requirements/ (every package pinned with its hashes): uv from bootstrap.lock through pip, then
# everything else from dev.lock through uv, then partarchive itself, editable, without its dependencies.
# The packages' bytecode is compiled at install: Python reads it even where PYTHONDONTWRITEBYTECODE is set.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
UV := $(BIN)/uv
UV_STAMP := $(VENV)/.uv
STAMP := $(VENV)/.installed
COMPILE := $(UV) pip compile --quiet --universal --python-version 3.11 --generate-hashes $(ARGS)

.PHONY: install lock demo test lint bench chaos clean

$(UV_STAMP): requirements/bootstrap.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --require-hashes -r requirements/bootstrap.lock
	touch $(UV_STAMP)

$(STAMP): $(UV_STAMP) pyproject.toml requirements/dev.lock
	$(UV) pip sync --quiet --python $(BIN)/python --require-hashes requirements/bootstrap.lock requirements/dev.lock \
		--compile-bytecode
	$(UV) pip install --quiet --python $(BIN)/python --no-deps --no-build-isolation -e .
	touch $(STAMP)

# Re-resolve the lock files from pyproject.toml and requirements/*.in (ARGS=--upgrade: newest releases).
lock: $(UV_STAMP)
	$(COMPILE) -o requirements/bootstrap.lock requirements/bootstrap.in
	$(COMPILE) -o requirements/dev.lock pyproject.toml requirements/build.in --extra dev

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/partarchive demo $(ARGS)

# The suite on pytest-xdist workers (TEST_WORKERS=0: all in one process): four, as the tests wait on
# processes and servers about half the time; each has its own embedded server, local cluster and
# Sentinel setup. With REDIS_URL=.../N worker k uses DB N + k: two workers there (DBs N and N+1).
# The suite starts some 230 Python processes: they keep our modules' bytecode (__pycache__, Python's default) also
# where PYTHONDONTWRITEBYTECODE is set, rather than each compiling them again (with the packages' not compiled at
# install either, that was ~0.45 s of CPU a process, half the suite's CPU).
TEST_WORKERS ?= $(if $(REDIS_URL),2,4)
test: $(STAMP)
	.ci/ensure-chromium
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check codec layers stats archiver tests bench
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python -m bench $(ARGS)

chaos: $(STAMP)
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m tests.chaos $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
	find codec layers stats archiver tests bench -name __pycache__ -prune -exec rm -rf {} +
