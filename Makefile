# The project's entry points. Every target sets up what it needs first (scripts/setup.sh).
#   make            generate build/rnic.v and an ECP5 synthesis report of the default core
#   make test       the regression (what CI runs)
#   make regress-full / soak / fuzz / synth / clean   (see README.md)
PY      := .venv/bin/python
PYTEST  := $(PY) -m pytest
JOBS    ?= auto
# the default configuration (interface.md §1)
CONFIG  ?=

.PHONY: all setup generate synth test regress-full soak fuzz clean regmap

all: setup generate synth

setup:
	@bash scripts/setup.sh

generate: setup
	$(PY) -m rnic.cli generate -o build/rnic.v $(CONFIG)

synth: generate
	$(PY) -m rnic.cli synth --target ecp5 $(CONFIG)

test: setup
	$(PYTEST) -n $(JOBS) --durations=25 -m "not full and not soak and not fuzz" tb

regress-full: setup
	$(PYTEST) -n $(JOBS) --durations=25 tb -m "not soak and not fuzz"

soak: setup
	bash scripts/pytest-marked.sh soak

fuzz: setup
	bash scripts/pytest-marked.sh fuzz

regmap: setup
	$(PY) -m rnic.cli regmap

clean:
	rm -rf build
