# attnlab: `make run` sets up .venv (once) and runs the tutorial's training; `make test` runs the tests.
# Pass Hydra overrides with ARGS, e.g. `make run ARGS="experiment=tutorial_walkthrough"`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.attnlab-installed

.PHONY: setup run test test-notebook notebook lint i18n bench compat compat-pre compat-src clean

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

# `make compat`: the golden, differential, variant and API tests in scratch venvs under .compat/, two per
# Python of COMPAT_PYTHONS (pyenv's, else pythonX.Y on PATH) and one on the pre-releases:
#   oldest-X.Y  the lowest versions pyproject.toml admits on that Python (COMPAT_OLDEST_X.Y, pinned; a
#               Python newer than a package's oldest wheels starts later: torch 2.2 on 3.12, 2.5 on 3.13)
#   newest-X.Y  the newest releases the declared ranges admit (PIP_CONSTRAINT=/dev/null lifts this
#               machine's torch cap)
#   pre-X.Y     newest plus the pre-releases of COMPAT_PRE (Hydra 1.4 rc, OmegaConf 2.4) on the newest
#               Python: the versions Python 3.14 needs
# `make compat-3.12` runs one Python's two venvs, `make compat-oldest-3.12` one venv. uv installs when it
# is on PATH (much faster), else pip. The first run downloads torch from PyPI (a CUDA build, ~3 GB per
# venv); later runs reuse the venvs. The code tested is this working tree, or with COMPAT_REF=BRANCH that
# commit's tree (git archive into .compat/src; its tests too). tiktoken's cache is a fresh folder per run
# (a file cached by another version would hide a failing read). Results: docs/compat.md.
COMPAT_DIR ?= $(CURDIR)/.compat
COMPAT_REF ?=
COMPAT_SRC := $(if $(COMPAT_REF),$(COMPAT_DIR)/src,$(CURDIR))
COMPAT_TESTS := tests/test_golden.py tests/test_differential.py tests/test_model.py tests/test_gpt.py \
	tests/test_model_variants.py tests/test_variants_run.py tests/test_api.py
COMPAT_PYTHONS ?= 3.10 3.11 3.12 3.13
COMPAT_PRE_PYTHON ?= 3.13
COMPAT_PRE := hydra-core==1.4.0rc3 omegaconf==2.4.1rc1
# before its tests, the pre venv runs `attnlab` with OmegaConf 2.4.0 forced under Hydra 1.3 (whose pin says <2.4),
# as `pip install -U omegaconf` leaves it: the tutorial's five lines must come out
COMPAT_PRE_FORCED := hydra-core==1.3.8 omegaconf==2.4.0 antlr4-python3-runtime==4.9.3
COMPAT_COMMON := tiktoken==0.12.0 hydra-core==1.3.2 omegaconf==2.3.0 tqdm==4.60.0
COMPAT_OLDEST_3.10 := torch==2.1.2 numpy==1.24.4 matplotlib==3.7.0 tensorboard==2.14.0 $(COMPAT_COMMON)
COMPAT_OLDEST_3.11 := $(COMPAT_OLDEST_3.10)
COMPAT_OLDEST_3.12 := torch==2.2.0 numpy==1.26.0 matplotlib==3.7.3 tensorboard==2.14.0 $(COMPAT_COMMON)
COMPAT_OLDEST_3.13 := torch==2.5.0 numpy==2.1.0 matplotlib==3.9.2 tensorboard==2.17.1 $(COMPAT_COMMON)
COMPAT_PACKAGES := torch numpy tiktoken hydra-core omegaconf tensorboard matplotlib tqdm
COMPAT_UV := $(shell command -v uv 2>/dev/null)
COMPAT_VENVS := $(foreach v,$(COMPAT_PYTHONS),oldest-$(v) newest-$(v)) pre-$(COMPAT_PRE_PYTHON)
# $(call compat_python,3.12): that Python's interpreter
compat_python = $(or $(wildcard $(shell pyenv prefix $(1) 2>/dev/null)/bin/python$(1)),python$(1))
# $(call compat_install,VENV,KIND): the install command; oldest: pinned (-c), newest/pre: upgrade everything
compat_install = $(if $(COMPAT_UV),$(COMPAT_UV) pip install --python $(1)/bin/python,env PIP_CONSTRAINT=/dev/null \
	$(1)/bin/python -m pip install) --quiet $(if $(filter oldest,$(2)),-c $(COMPAT_DIR)/$(notdir $(1)).txt,--upgrade \
	$(if $(COMPAT_UV),,--upgrade-strategy eager))

compat: $(addprefix compat-,$(COMPAT_VENVS))
$(foreach v,$(COMPAT_PYTHONS),$(eval compat-$(v): compat-oldest-$(v) compat-newest-$(v)))
compat-pre: compat-pre-$(COMPAT_PRE_PYTHON)

compat-src:
	@mkdir -p $(COMPAT_DIR)
	$(if $(COMPAT_REF),rm -rf $(COMPAT_SRC) && mkdir -p $(COMPAT_SRC) && git archive $(COMPAT_REF) | tar -x -C $(COMPAT_SRC))
	@echo "compat: code $(if $(COMPAT_REF),$(COMPAT_REF) at $$(git rev-parse --short $(COMPAT_REF)),$(CURDIR) at $$(git describe --always --dirty))"

# one venv at a time (make -j would download several torches at once); pytest niced on shared cores
.NOTPARALLEL:
$(addprefix compat-,$(COMPAT_VENVS)): compat-%: compat-src
	$(eval kind := $(firstword $(subst -, ,$*)))
	$(eval py := $(lastword $(subst -, ,$*)))
	$(eval venv := $(COMPAT_DIR)/$*)
	@printf '%s\n' $(COMPAT_OLDEST_$(py)) > $(venv).txt
	test -x $(venv)/bin/python || $(call compat_python,$(py)) -m venv $(venv)
	nice $(call compat_install,$(venv),$(kind)) -e $(COMPAT_SRC) pytest $(if $(filter pre,$(kind)),$(COMPAT_PRE))
	$(if $(filter pre,$(kind)),nice $(call compat_install,$(venv),pre) --no-deps $(COMPAT_PRE_FORCED) && cd $(COMPAT_DIR) \
	&& rm -rf $*.run && mkdir $*.run && cd $*.run && $(venv)/bin/attnlab logging=off 2>/dev/null | tee ../$*.forced \
	&& test "$$(grep -c '^step ' ../$*.forced)" = 5 && grep -q '^completed: 201 steps' ../$*.forced \
	&& echo "compat $*: the tutorial's five lines with $(COMPAT_PRE_FORCED) forced" \
	&& nice $(call compat_install,$(venv),pre) $(COMPAT_PRE))
	@$(venv)/bin/python -c "import sys, importlib.metadata as md; print('compat $*: python', \
	sys.version.split()[0], *(f'{p} {md.version(p)}' for p in sys.argv[1:]))" $(COMPAT_PACKAGES) | tee $(venv).versions
	rm -rf $(venv).tiktoken-cache
	cd $(COMPAT_SRC) && TIKTOKEN_CACHE_DIR=$(venv).tiktoken-cache OMP_NUM_THREADS=1 nice -n 15 $(venv)/bin/python -m pytest \
	-q -p no:cacheprovider -p no:xdist $(COMPAT_TESTS) $(ARGS) > $(venv).log 2>&1; s=$$?; cat $(venv).log; exit $$s

clean:
	rm -rf $(VENV) $(COMPAT_DIR) outputs multirun .pytest_cache
