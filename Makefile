# attnlab: `make run` sets up .venv (once) and runs the tutorial's training; `make test` runs the tests.
# Pass Hydra overrides with ARGS, e.g. `make run ARGS="experiment=tutorial_walkthrough"`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.attnlab-installed

.PHONY: setup run test test-notebook notebook lint i18n bench compat compat-src compat-oldest compat-newest clean

setup: $(STAMP)

# pip lists each package as it goes; the one setuptools notice left ("Editable installation ...
# folders with the same name as your package") comes from conf/ being shipped as attnlab.conf.
$(STAMP): pyproject.toml constraints.txt
	@echo "attnlab setup: creating $(VENV) and installing attnlab with the tested versions (constraints.txt):"
	@echo "  torch and about 50 other packages, 1-5 minutes (longer when torch comes from PyPI)."
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install -c constraints.txt -e '.[launchers,sweepers,test]'
	touch $(STAMP)
	@echo "attnlab setup: done; the commands are in $(BIN) (attnlab, attnlab-check, attnlab-compare, attnlab-reproduce, attnlab-report)"

run: $(STAMP)
	$(BIN)/attnlab $(ARGS)

# two pytest-xdist workers; a module's tests stay on one worker (its shared runs are made once);
# pytest's progress (a dot per test and the percentage done), the 10 slowest tests at the end
test: $(STAMP)
	$(BIN)/ruff check attnlab tests benchmarks
	$(BIN)/python -m pytest -n 2 --dist loadscope --durations=10 -m "not notebook" $(ARGS)

# the companion notebook executed on a real kernel, offline, and its inline report opened in Chromium (~30 s)
test-notebook: $(STAMP)
	$(BIN)/python -m pytest -p no:xdist -m notebook $(ARGS)

# notebooks/*.ipynb built from their jupytext source (notebooks/*.py, the one to edit)
notebook: $(STAMP)
	$(BIN)/jupytext --to ipynb notebooks/*.py

lint: $(STAMP)
	$(BIN)/ruff check attnlab tests benchmarks

# `make i18n`: every _() / N_() of attnlab/ and tr() of the report page into the zh catalog (new
# sentences come in untranslated: fill their msgstr), then the compiled .mo (tests/test_i18n.py checks both)
LOCALE := attnlab/locale
i18n: $(STAMP)
	$(BIN)/pybabel extract -F babel.cfg -k N_ -k tr --no-location --omit-header --sort-output -o $(LOCALE)/attnlab.pot .
	$(BIN)/pybabel update -i $(LOCALE)/attnlab.pot -d $(LOCALE) -D attnlab -l zh_CN --no-fuzzy-matching
	$(BIN)/pybabel compile -d $(LOCALE) -D attnlab -l zh_CN

bench: $(STAMP)
	$(BIN)/python -m benchmarks.run $(ARGS)

# `make compat`: the golden, differential and variant tests in two scratch venvs under .compat/:
# "oldest" (the lower bounds in pyproject.toml, pinned) and "newest" (the newest releases the declared
# ranges admit; PIP_CONSTRAINT=/dev/null lifts this machine's torch cap). The first run downloads torch
# from PyPI (a CUDA build, ~3 GB per venv); later runs reuse the venvs. The code tested is this working
# tree, or with COMPAT_REF=BRANCH that commit's tree (git archive into .compat/src; its tests too).
# tiktoken's cache is a fresh folder per run (a file cached by another version would hide a failing read).
# Results: docs/compat.md.
COMPAT_DIR ?= $(CURDIR)/.compat
COMPAT_REF ?=
COMPAT_SRC := $(if $(COMPAT_REF),$(COMPAT_DIR)/src,$(CURDIR))
COMPAT_TESTS := tests/test_golden.py tests/test_differential.py tests/test_model.py tests/test_gpt.py \
	tests/test_model_variants.py tests/test_variants_run.py
COMPAT_OLDEST := torch==2.1.2 numpy==1.24.4 tiktoken==0.12.0 hydra-core==1.3.2 omegaconf==2.3.0 \
	tensorboard==2.14.0 matplotlib==3.7.0 tqdm==4.60.0
COMPAT_PACKAGES := torch numpy tiktoken hydra-core omegaconf tensorboard matplotlib tqdm
COMPAT_INSTALL_oldest = PIP_CONSTRAINT=$(COMPAT_DIR)/oldest.txt $(COMPAT_DIR)/oldest/bin/python -m pip install
COMPAT_INSTALL_newest = PIP_CONSTRAINT=/dev/null $(COMPAT_DIR)/newest/bin/python -m pip install \
	--upgrade --upgrade-strategy eager

compat: compat-oldest compat-newest

compat-src:
	@mkdir -p $(COMPAT_DIR) && printf '%s\n' $(COMPAT_OLDEST) > $(COMPAT_DIR)/oldest.txt
	$(if $(COMPAT_REF),rm -rf $(COMPAT_SRC) && mkdir -p $(COMPAT_SRC) && git archive $(COMPAT_REF) | tar -x -C $(COMPAT_SRC))
	@echo "compat: code $(if $(COMPAT_REF),$(COMPAT_REF) at $$(git rev-parse --short $(COMPAT_REF)),$(CURDIR) at $$(git describe --always --dirty))"

compat-oldest compat-newest: compat-%: compat-src
	test -x $(COMPAT_DIR)/$*/bin/python || $(PYTHON) -m venv $(COMPAT_DIR)/$*
	$(COMPAT_INSTALL_$*) --quiet -e $(COMPAT_SRC) pytest
	@$(COMPAT_DIR)/$*/bin/python -c "import sys, importlib.metadata as md; print('compat $*: python', \
	sys.version.split()[0], *(f'{p} {md.version(p)}' for p in sys.argv[1:]))" $(COMPAT_PACKAGES) \
	| tee $(COMPAT_DIR)/$*.versions
	rm -rf $(COMPAT_DIR)/$*.tiktoken-cache
	cd $(COMPAT_SRC) && TIKTOKEN_CACHE_DIR=$(COMPAT_DIR)/$*.tiktoken-cache $(COMPAT_DIR)/$*/bin/python -m pytest -q -p no:cacheprovider -p no:xdist $(COMPAT_TESTS) $(ARGS)

clean:
	rm -rf $(VENV) $(COMPAT_DIR) outputs multirun .pytest_cache
