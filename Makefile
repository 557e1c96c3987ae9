# attnlab: `make run` sets up .venv (once) and runs the tutorial's training; `make test` runs the tests.
# Pass Hydra overrides with ARGS, e.g. `make run ARGS="experiment=tutorial_walkthrough"`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.attnlab-installed

.PHONY: setup run test lint bench clean

setup: $(STAMP)

# pip lists each package as it goes; the one setuptools notice left ("Editable installation ...
# folders with the same name as your package") comes from conf/ being shipped as attnlab.conf.
$(STAMP): pyproject.toml constraints.txt
	@echo "attnlab setup: creating $(VENV) and installing attnlab with the tested versions (constraints.txt):"
	@echo "  torch and about 50 other packages, 1-5 minutes (longer when torch comes from PyPI)."
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install -c constraints.txt -e '.[launchers,test]'
	touch $(STAMP)
	@echo "attnlab setup: done; the commands are in $(BIN) (attnlab, attnlab-compare, attnlab-reproduce, attnlab-report)"

run: $(STAMP)
	$(BIN)/attnlab $(ARGS)

# two pytest-xdist workers; a module's tests stay on one worker (its shared runs are made once);
# pytest's progress (a dot per test and the percentage done), the 10 slowest tests at the end
test: $(STAMP)
	$(BIN)/ruff check attnlab tests benchmarks
	$(BIN)/python -m pytest -n 2 --dist loadscope --durations=10 $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check attnlab tests benchmarks

bench: $(STAMP)
	$(BIN)/python -m benchmarks.run $(ARGS)

clean:
	rm -rf $(VENV) outputs multirun .pytest_cache
