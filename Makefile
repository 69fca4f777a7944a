# The common commands. `make book` and `make test` set everything up first (into .venv).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch==2.13.0 is the CPU build on the course's machines. With an NVIDIA GPU, use
#   make setup TORCH=torch        (PyPI's default build for Linux, with CUDA)
TORCH ?= torch==2.13.0
# Jupyter refuses to start as root unless told it may
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root,)

.PHONY: help system setup book test test-quick lint lab clean assignments bench publish release check-seeds check-otter bench-flash check-gpu

# Debian/Ubuntu packages: bubblewrap (the grader's sandboxes) and chromium-headless-shell (the browser
# test: Chromium's engine without the desktop browser around it, the build Playwright itself uses for
# headless runs; the browser tests take about a tenth less CPU with it than with the full chromium,
# which they also accept). Installed with apt-get as root, or through sudo; skipped when both are there.
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

# `make` alone lists the targets: each documented target's line ends with `## what it does`
.DEFAULT_GOAL := help
help:  ## list the documented targets
	@awk -F ':.*## ' '/^[a-zA-Z_-]+:.*## / { printf "  %-13s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

system:  ## install the system packages the course needs (bubblewrap, chromium-headless-shell)
	@if command -v bwrap >/dev/null && command -v chromium-headless-shell >/dev/null; then echo "bubblewrap and chromium-headless-shell are installed"; \
	else $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq bubblewrap chromium-headless-shell >/dev/null; fi

setup: $(VENV)/.installed  ## create .venv and install the course with its test tools (the CPU build of PyTorch here)

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e ".[test]"
	$(BIN)/python -c "import matplotlib.pyplot"  # builds matplotlib's font cache now, not in a chapter's output
	mkdir -p $(VENV)/share/jupyter/lab/settings
	cp src/jupyterlab_settings/overrides.json $(VENV)/share/jupyter/lab/settings/overrides.json
	touch $@

book: setup  ## build the website into _build/html (strict: any warning fails)
	$(BIN)/jupyter-book build -W -n --keep-going .

# parallel test workers (pytest-xdist), each taking units of work (a file, or a part a file marks: tests/units.py),
# longest first, chapters before the book build before the browser (tests/plugins/units.py); the run ends with a
# table of where its time went (tests/plugins/time_table.py)
TEST_JOBS ?= 2
test: lint  ## the whole check: lint, every chapter (nbval, once), the package, homework and grader tests, the strict book build and the browser tests; ends with where the time went
	$(BIN)/python -m pytest -n $(TEST_JOBS)

test-quick: setup  ## the package's own tests only (no chapters, homework, grader or website): the inner loop
	$(BIN)/python -m pytest tests -q -m "not course"

# seeds the chapters' texts do not use (each training chapter's own SEED line is 0)
SEEDS ?= 1 2 3 4 5
check-seeds: setup  ## run the chapters that train models with other seeds (SEEDS="1 2 3 4 5") and print each claim's worst margin; minutes, not part of make test
	$(BIN)/python tools/check_seeds.py --seeds $(SEEDS)

check-otter: setup  ## grade every honest habit and each homework's comparing notebook with `otter run` (Gradescope) and the class grader, and report any score that differs; minutes, not part of make test
	$(BIN)/python -m tools.check_otter

lint: setup  ## ruff: the rules in pyproject.toml, and the formatting
	$(BIN)/ruff check
	$(BIN)/ruff format --check

assignments: setup  ## build every homework's student version and autograder (fails if a solution fails its tests)
	$(BIN)/python -m attngrade assign

bench: setup  ## time attnbook against PyTorch's kernels on this machine's device (BENCH_ARGS=--quick for a smoke run)
	$(BIN)/python -m attnbook.lab.bench $(BENCH_ARGS)

release: book  ## the student-facing course in dist/course: site, package wheel/sdist, student notebooks, public source; no masters, hidden tests or mutants (RELEASE_ARGS=--out DIR)
	$(BIN)/python -m attngrade release $(RELEASE_ARGS)

bench-flash: setup  ## time FlashAttention (Triton kernels and PyTorch tiles) against PyTorch's SDPA and the plain formula, forward and forward+backward (BENCH_ARGS=--quick for a smoke run; on a GPU: n 512 to 16k, bfloat16)
	$(BIN)/python -m attnbook.lab.bench_flash $(BENCH_ARGS)

# on a machine with a CUDA GPU (a short device window: at most 7.5 minutes by the steps' caps); no `setup`
# dependency, since a device machine has its own PyTorch and Triton and cannot install (python3 without .venv)
check-gpu:  ## the GPU check: the tests' CUDA variants, chapters 8 and 11 on CUDA with Triton compiled, bench-flash --check, then chapter 11's table (ARGS=--dry-run lists the steps; without a GPU it says so and fails)
	$(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON)) tools/check_gpu.py $(ARGS)

publish: book  ## push the built site to the gh-pages branch of the repository (GitHub Pages; Colab buttons open its notebooks)
	$(BIN)/ghp-import --no-jekyll --push --force _build/html

lab: setup  ## open the chapters as notebooks in JupyterLab
	$(BIN)/jupyter lab $(ALLOW_ROOT) book/

clean:  ## remove the built site, pytest's cache and hypothesis's database
	rm -rf _build .pytest_cache .hypothesis
