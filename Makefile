# Build, serve and test the book. Each target sets up what it needs (.venv from
# requirements.txt, node_modules from package-lock.json) and reuses it on the next run:
# stamp files record what was installed from which file.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-builtin-rules --no-print-directory

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
VENV_STAMP := $(VENV)/.installed
NPM_STAMP := node_modules/.installed
BUILD := _build
HTML := $(BUILD)/html
LOGS := $(BUILD)/logs
PORT ?= 8000
# The PDF edition, beside the site; the file name is _config.yml's offline_site_pdf, which
# the site's download menu and the intro page link.
PDF := $(HTML)/attention-book.pdf
# The browser that prints the PDF and drives the browser tests: Debian's chromium, else the
# first chromium, chromium-browser (Ubuntu's snap) or google-chrome on PATH; CHROMIUM=/path
# names another. make test and make pdf check for it before anything runs.
BROWSER_NAMES := chromium chromium-browser google-chrome google-chrome-stable
CHROMIUM ?= $(or $(wildcard /usr/bin/chromium),$(firstword $(foreach name,$(BROWSER_NAMES),\
  $(shell command -v $(name) 2>/dev/null))),/usr/bin/chromium)
export CHROMIUM
# Inside make test, which has run check-browser already, test-book skips it: a phony
# prerequisite would hold test-book back while make -j starts the parts listed after it.
BROWSER_CHECK := $(if $(BROWSER_CHECKED),,check-browser)
# Extra flags for `jupyter-book build`; `make test` passes --all for a full rebuild.
JB_FLAGS ?=
# A second numeric environment for the checked outputs: PyTorch's portable kernels instead of
# this CPU's vector units, MKL and oneDNN held to SSE4, and one thread, so kernels and
# reduction orders differ from the default run. Committed outputs must pass in both.
PORTABLE := ATEN_CPU_CAPABILITY=default OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 \
  MKL_ENABLE_INSTRUCTIONS=SSE4_2 ONEDNN_MAX_CPU_ISA=SSE41
# One torch thread in each process of make test. Its parts run two at a time on two cores, and
# a torch thread that waits for a core another process holds spins instead of sleeping: on a
# busy machine a second thread made small operations up to 36 times slower (the sampled test
# of speculative decoding: 336 s with two threads, 9 s with one, beside other work).
ONE_THREAD := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
# nbval, one kernel per notebook and one notebook per CPU at a time (pytest-xdist; loadfile
# keeps each notebook's cells together and in order).
# pytest-xdist workers: one per CPU, and no more than the available memory holds (a lesson's
# kernel stays under 2 GiB, a browser test's Chromium under 1.5 GiB; tests/footprint.py).
WORKERS = $(shell $(PYTHON) tests/footprint.py workers $(1) $(2))
NBVAL = -m pytest --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg \
  -n $(call WORKERS,2) --dist loadfile

# The parts of make test that run under tests/footprint.py (see test, below).
FOOTPRINT_PARTS := test-book test-standalone test-lib test-slow test-nbval
FOOTPRINT_TARGETS := $(addprefix footprint-,$(FOOTPRINT_PARTS) test-browser)

.PHONY: help book pdf serve lab execute models test test-lib test-slow test-nbval test-book \
  test-standalone test-browser check-browser doctor clean distclean \
  $(FOOTPRINT_TARGETS)

help:
	@echo "make book       build the static site into $(HTML)"
	@echo "make pdf        the whole book as one PDF, $(PDF) (Chromium prints it; no TeX)"
	@echo "make serve      build, then serve it at http://127.0.0.1:$(PORT)"
	@echo "make lab        JupyterLab on the lessons"
	@echo "make execute    run lessons top to bottom and save their outputs (NB=path for one)"
	@echo "make models     re-train every model attnlib ships (attnlib/models/weights; about 55 minutes of CPU time, one thread)"
	@echo "make test       ruff, pytest, nbval, book build, standalone lessons, PDF, browser, actionlint"
	@echo "make test-lib   the fast part: ruff, pytest without the slow tests and the site checks, doctests"
	@echo "                 (the other parts of make test: test-slow, test-nbval, test-book,"
	@echo "                 test-standalone, test-browser, which needs test-book's site and PDF)"
	@echo "make doctor     which system packages are missing (FIX=1 installs them, with sudo)"
	@echo "make clean      remove $(BUILD) and caches (distclean: also .venv and node_modules)"

$(VENV_STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(NPM_STAMP): package.json package-lock.json
	npm ci --ignore-scripts --no-audit --no-fund
	touch $@

# Warnings are errors; --keep-going reports all of them. The log stays in $(LOGS), with any
# execution reports, when the build fails.
book: $(VENV_STAMP) $(NPM_STAMP)
	@mkdir -p $(LOGS)
	@echo "jupyter-book build . -W --keep-going $(JB_FLAGS)  (log: $(LOGS)/book-build.log)"
	@if $(BIN)/jupyter-book build . -W --keep-going $(JB_FLAGS) 2>&1 | tee $(LOGS)/book-build.log; then \
	  echo "site: $(HTML)/index.html"; \
	else \
	  status=$$?; \
	  if [ -d $(HTML)/reports ]; then cp -r $(HTML)/reports $(LOGS)/; fi; \
	  echo "book build failed; log and reports in $(LOGS)"; \
	  exit $$status; \
	fi

# The system packages (.ci/prerequisites): what is there and what is missing; FIX=1 installs
# only the missing ones, through sudo when not root.
doctor:
	@.ci/prerequisites $(if $(FIX),--install)
	@$(PYTHON) tests/footprint.py memory

# Fails at once, with what to install, when the browser the PDF and the site checks need is
# missing (rather than ten minutes into make test).
check-browser:
	@if [ ! -x "$(CHROMIUM)" ]; then \
	  echo "make: no Chromium at $(CHROMIUM). make pdf and make test print the PDF and check the"; \
	  echo "site in it: make doctor says what to install (make doctor FIX=1 installs it),"; \
	  echo "or name another browser with CHROMIUM=/path."; \
	  echo "make book and make serve do not need it."; \
	  exit 1; \
	fi

# The single-page build, printed by Chromium (book/_ext/print_pdf.py): no TeX.
pdf: check-browser $(VENV_STAMP) $(NPM_STAMP)
	@mkdir -p $(LOGS)
	@echo "jupyter-book build . --builder singlehtml  (log: $(LOGS)/pdf-build.log)"
	$(BIN)/jupyter-book build . --builder singlehtml -W --keep-going $(JB_FLAGS) \
	  > $(LOGS)/pdf-build.log 2>&1 || { tail -n 30 $(LOGS)/pdf-build.log; exit 1; }
	$(BIN)/python book/_ext/print_pdf.py $(BUILD)/singlehtml $(PDF)

serve: book
	$(BIN)/python -m http.server $(PORT) --bind 127.0.0.1 -d $(HTML)

# Jupyter refuses to run as root unless told; containers often are root.
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)

lab: $(VENV_STAMP)
	$(BIN)/jupyter lab --ServerApp.ip=127.0.0.1 --ServerApp.root_dir=. \
	  --LabApp.default_url=/lab/tree/lessons $(ALLOW_ROOT)

# Lessons are committed executed; NB=lessons/NN_slug.ipynb runs one, the default runs all.
execute: $(VENV_STAMP)
	$(BIN)/python tests/execute_lessons.py $(NB)

# Re-create every shipped model from scratch (python -m attnlib.models.train, one thread); the
# fine-tuned conversions run after the models they start from. Not part of `make test`.
models: $(VENV_STAMP)
	$(BIN)/python -m attnlib.models.train all

# Day-to-day work on attnlib: lint, the tests not marked slow, the docstring examples; no lesson
# runs, no site. The slow tests (pytest -m slow: training steps, sampling statistics, a
# benchmark run, kernels in Triton's interpreter) are a part of make test of their own.
test-lib: $(VENV_STAMP) $(NPM_STAMP)
	@echo "== ruff"
	$(BIN)/ruff check .
	@echo "== attnlib tests and book source checks, without the slow ones"
	$(ONE_THREAD) $(BIN)/python -m pytest tests/ --ignore=tests/book/site -m "not slow"
	@echo "== attnlib docstring examples (doctests), then again on portable kernels"
	$(ONE_THREAD) $(BIN)/python -m pytest --doctest-modules attnlib
	$(PORTABLE) $(BIN)/python -m pytest -q --doctest-modules attnlib

test-slow: $(VENV_STAMP)
	@echo "== the slow tests of attnlib (pytest -m slow)"
	$(ONE_THREAD) $(BIN)/python -m pytest tests/ --ignore=tests/book/site -m slow

# make test: five parts that need nothing from each other run two at a time, in the order
# that keeps both CPUs busy: test-book (mostly one CPU) beside the standalone lessons, whose
# two environments are installed side by side and whose lessons then run a kernel per CPU;
# test-lib and test-slow (one CPU each) take the free slots and nbval (a kernel per CPU) the
# last, so that what ends last can use both CPUs. Each part's output is printed when it ends. The
# browser checks come last and alone: they need the built site and the PDF, and their
# three browsers fill both CPUs by themselves.
TEST_JOBS ?= 2

# Each part runs under tests/footprint.py, which records its wall time and the peak resident
# memory of its largest process; the report at the end compares them with tests/footprint.json
# and fails when one process went over the 4 GiB the README promises.
test: check-browser $(VENV_STAMP) $(NPM_STAMP)
	@$(PYTHON) tests/footprint.py start
	@echo "== $(FOOTPRINT_PARTS): $(TEST_JOBS) at a time, each part's output when it ends"
	$(MAKE) -j $(TEST_JOBS) --output-sync=target $(addprefix footprint-,$(FOOTPRINT_PARTS)) \
	  BROWSER_CHECKED=1
	$(MAKE) footprint-test-browser
	@echo "== actionlint"
	$(BIN)/actionlint
	@echo "== what make test cost: wall time and peak memory per part (tests/footprint.json)"
	$(PYTHON) tests/footprint.py report --files
	@echo "make test: every check passed"

# A static pattern rule: make does not search implicit rules for phony targets.
$(FOOTPRINT_TARGETS): footprint-%:
	@$(PYTHON) tests/footprint.py run $* -- $(MAKE) $*

test-nbval: $(VENV_STAMP)
	@echo "== lessons against their committed outputs (nbval), then again on portable kernels"
	$(ONE_THREAD) $(BIN)/python $(NBVAL) lessons/
	$(PORTABLE) $(BIN)/python $(NBVAL) -q lessons/

test-book: $(BROWSER_CHECK) $(VENV_STAMP) $(NPM_STAMP)
	@echo "== book build (full rebuild, warnings are errors)"
	$(MAKE) book JB_FLAGS=--all
	BOOK_SITE_REQUIRED=1 $(BIN)/python -m pytest tests/book/site/test_site_build.py
	@echo "== the PDF edition (single-page build printed by Chromium)"
	$(MAKE) pdf
	BOOK_SITE_REQUIRED=1 $(BIN)/python -m pytest tests/book/site/test_site_pdf.py

# The environments test-standalone runs each lesson in: Colab's package versions and the
# newest that requirements.txt pins (STANDALONE_ENVS=colab for one); make test runs both.
STANDALONE_ENVS ?= colab newest

test-standalone: $(VENV_STAMP)
	@echo "== each lesson alone, in a fresh environment: $(STANDALONE_ENVS)"
	$(ONE_THREAD) $(BIN)/python tests/check_lessons_standalone.py $(addprefix --env ,$(STANDALONE_ENVS))

# Needs the site and the PDF that test-book builds.
test-browser: check-browser $(VENV_STAMP) $(NPM_STAMP)
	@echo "== the site in a browser (weight, layout shift, axe-core, figures, navigation, search)"
	BOOK_SITE_REQUIRED=1 $(BIN)/python -m pytest -o faulthandler_timeout=1200 -n $(call WORKERS,1.5,--most 3) --dist loadfile \
	  tests/book/site/test_site_browser.py tests/book/site/test_site_figures.py \
	  tests/book/site/test_site_sources.py tests/book/site/test_site_reader.py

clean:
	rm -rf $(BUILD) .pytest_cache .ruff_cache .hypothesis build dist

distclean: clean
	rm -rf $(VENV) node_modules
