# `make book` and `make test` are the two user commands; both create .venv on a fresh machine.
# Installs use constraints.txt: the exact versions that computed the stored outputs.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PIP_INSTALL := $(PY) -m pip install --quiet -c constraints.txt
NOTEBOOKS := $(shell find book -name '*.ipynb' -not -path '*/.ipynb_checkpoints/*' | sort)
# Parallel test workers (pytest-xdist); each notebook runs in one worker, single-threaded.
JOBS ?= 2
QUICK := TFBOOK_PROFILE=quick
# A stalled nbval cell fails after NBVAL_CELL_TIMEOUT s: max(120, 3 x the slowest quick-profile cell measured
# under `make test` load). The slowest is icgd/07's App. G training cell: 58.6 s in a clean-clone CI run, up to
# ~70 s with two notebooks on two cores; 3 x 70 = 210. tests/run_nbval.py then reruns each notebook with a failed
# cell once, whole, in a fresh pytest process; an xfail counts as a failure.
NBVAL_CELL_TIMEOUT ?= 210
# Under make test-portable's generic kernels the same cells run about twice as slowly (icgd/07's training cell:
# 74 s here, 146 s portable, both alone): twice the limit.
PORTABLE_CELL_TIMEOUT ?= 420
NBVAL := $(PY) tests/run_nbval.py -q -p no:cacheprovider -n $(JOBS) --dist loadfile --nbval --nbval-current-env \
	--nbval-cell-timeout=$(NBVAL_CELL_TIMEOUT) --nbval-sanitize-with tests/nbval_sanitize.cfg
# make book executes the notebooks into this copy (tfbook.build.notebooks build-copy), then builds the HTML from it.
BOOK_SRC := _build/book_src
# Other BLAS/kernel code paths, the way another CPU would take them (see CONTRIBUTING.md: test-portable). Measured here
# (AMD EPYC, AVX2): COMPATIBLE changes every MKL product (small and large mm, bmm, the Turing fleet's outputs) and
# the generic ATen kernels change softmax; MKL_CBWR=AVX changes small mm and bmm only (as SSE4_2 does).
PORTABLE := MKL_CBWR=COMPATIBLE OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 ATEN_CPU_CAPABILITY=default
PORTABLE_AVX := MKL_CBWR=AVX OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
UNIT := $(PY) -m pytest -q -p no:cacheprovider -n $(JOBS) -m "not html and not mutation" --doctest-modules tests tfbook
# The tests of the book's machinery compute nothing another CPU's kernels could change (the executor, nbval's
# runner, the audit and its pages, the bench, the page checks, the widgets' controls responding): the portable runs
# leave them out.
MACHINERY_TESTS := bench bench_storage binder claims_audit claims_audit_rules claims_page executor exercises full \
	layering nbval_baseline notebooks run_nbval run_sabotage_check widgets
PORTABLE_UNIT := $(UNIT) $(foreach t,$(MACHINERY_TESTS),--ignore=tests/test_$(t).py)

.PHONY: pdf browser test unit nbval test-portable test-portable-avx test-sabotage test-mutation test-claims claims-audit test-html book book-stored claims-page notebooks full \
	full-estimate bench lab screenshots constraints clean

$(STAMP): requirements.txt constraints.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PIP_INSTALL) -r requirements.txt -e .
	touch $(STAMP)

## make test: unit tests and doctests, then every notebook compared with its stored outputs (quick profile).
test: unit nbval

unit: $(STAMP)
	$(QUICK) OMP_NUM_THREADS=1 $(UNIT)

# make nbval records each notebook's claims and run here (tfbook.build.nbval_baseline): make test-claims takes its
# runs without a sabotage from them instead of executing every notebook once more, and a notebook's sabotaged runs
# too when its kernel built no core layer.
NBVAL_BASELINE := _build/claims_audit/nbval

nbval: $(STAMP)
	$(QUICK) OMP_NUM_THREADS=1 TFBOOK_NBVAL_BASELINE=$(NBVAL_BASELINE) TFBOOK_NBVAL_WIDGETS=1 $(NBVAL) $(NOTEBOOKS)

## make test-portable: the unit suite (less the machinery's tests) and nbval again under MKL's compatible mode with one
## thread and generic ATen kernels (the widest change of code paths measured here: every MKL product and softmax).
## make test-portable-avx: both under MKL's AVX code path, which changes a subset of those (small mm and bmm);
## CI's 50-minute budget leaves it out.
test-portable: $(STAMP)
	$(QUICK) $(PORTABLE) $(PORTABLE_UNIT)
	$(QUICK) $(PORTABLE) $(NBVAL) --nbval-cell-timeout=$(PORTABLE_CELL_TIMEOUT) $(NOTEBOOKS)

test-portable-avx: $(STAMP)
	$(QUICK) $(PORTABLE_AVX) $(PORTABLE_UNIT)
	$(QUICK) $(PORTABLE_AVX) $(NBVAL) $(NOTEBOOKS)

## make test-sabotage: every chapter's unit test file (tests/test_<chapter>*.py) run with the core sabotaged by
## 1e-3 (TFBOOK_PERTURB_CORE) must fail at least one test, unless its docstring exempts it (tests/run_sabotage_check.py).
test-sabotage: $(STAMP)
	$(QUICK) OMP_NUM_THREADS=1 $(PY) tests/run_sabotage_check.py -n $(JOBS)

## make test-mutation: every construction notebook must fail a claim when the core is perturbed by 1e-3 (CI, until
## the stored claims audit below exists and test-claims replaces it).
test-mutation: $(STAMP)
	$(QUICK) OMP_NUM_THREADS=1 $(PY) -m pytest -q -p no:cacheprovider -n $(JOBS) -m mutation tests/book

## make test-claims: every notebook under three sabotages of the core (zero, eps, weights; tfbook.build.claims_audit),
## $(JOBS) runs at a time, and once more without training (TFBOOK_UNTRAINED=1) for the notebooks with experiment
## claims, into a scratch audit; then every construction claim must be broken by a sabotage and every experiment
## claim by the untrained run (or be on tests/claims_audit_allow.json), no other claim may move, and
## book/claims_audit.json must be current and agree. The runs without a sabotage are make nbval's where they
## qualify (same code, library and environment, every cell passed); the others are executed. A qualifying run
## that built no core layer (tfbook.layers.core_layers_built) stands for the three sabotaged runs too.
test-claims: $(STAMP)
	$(PY) -m tfbook.build.claims_audit run --jobs $(JOBS) --output _build/claims_audit/audit.json \
		--baseline-from $(NBVAL_BASELINE)
	$(PY) -m tfbook.build.claims_audit check --fresh _build/claims_audit/audit.json

## make claims-audit: the same runs into the stored audit, book/claims_audit.json, and the claims page (commit both).
claims-audit: $(STAMP)
	$(PY) -m tfbook.build.claims_audit run --jobs $(JOBS)
	$(PY) -m tfbook.build.claims_page

## make test-html: the rendered book (after `make book-stored`): no reprs, no long lines, images, titles, TOC; then
## in a headless Chromium (installed here when missing) every page at 1400 and 412 px (verdicts in view, no console
## error, dark-mode captions) and the printed book (`make pdf`: every verdict, solution and figure, no raw TeX).
test-html: $(STAMP)
	test -f _build/html/index.html || { echo "run make book-stored first"; exit 1; }
	$(PY) -m pytest -q -p no:cacheprovider -m html tests/test_html.py
	$(MAKE) browser pdf
	$(PY) -m pytest -q -p no:cacheprovider -n $(JOBS) -m html tests/test_browser.py tests/test_pdf.py

## make browser: Debian's chromium, chromedriver and poppler-utils (pdftotext), installed when missing (as root).
browser:
	command -v chromium >/dev/null && command -v chromedriver >/dev/null && command -v pdftotext >/dev/null || \
		{ test "$$(id -u)" = 0 || { echo "install chromium chromium-driver poppler-utils (Debian)"; exit 1; }; \
		  apt-get install -y -q chromium chromium-driver poppler-utils >/dev/null 2>&1 || \
		  { apt-get update -q >/dev/null && apt-get install -y -q chromium chromium-driver poppler-utils >/dev/null; }; }

## make book: execute every notebook ($(JOBS) at a time, tfbook.build.notebooks' executor) into a build copy, then
## build the HTML book in _build/html from that copy; the stored notebooks are not touched.
book: $(STAMP)
	$(PY) -m tfbook.build.notebooks build-copy --jobs $(JOBS) $(BOOK_SRC)
	$(VENV)/bin/jupyter-book build $(BOOK_SRC) --path-output . --keep-going

## make book-stored: build from the stored outputs (no execution), warnings as errors (CI).
book-stored: $(STAMP) claims-page
	$(QUICK) $(VENV)/bin/jupyter-book build . -W -n --keep-going

## make pdf: the whole book as one PDF (_build/pdf/tfbook.pdf, offered from the book's header), printed
## page by page from the built HTML by a headless Chromium (make browser installs it); builds the HTML from
## the stored outputs first when there is none.
pdf: $(STAMP) browser
	test -f _build/html/index.html || $(MAKE) book-stored
	$(PY) -m tfbook.build.pdf --jobs $(JOBS)

## make claims-page: regenerate book/claims.md (every claim of the book) from the stored outputs.
claims-page: $(STAMP)
	$(PY) -m tfbook.build.claims_page

## make notebooks: re-execute every notebook in place (quick profile), store outputs, regenerate claims page.
notebooks: $(STAMP)
	$(QUICK) $(PY) -m tfbook.build.notebooks execute --jobs $(JOBS) $(NOTEBOOKS)

## make full: every notebook in the full profile into _build/full (stored outputs untouched), with a report.
full: $(STAMP)
	$(PY) -m tfbook.build.full

full-estimate: $(STAMP)
	$(PY) -m tfbook.build.full --estimate

bench: $(STAMP)
	$(PY) -m tfbook.build.bench

## make lab: JupyterLab in the venv (requirements-lab.txt), opened on the book's folder.
lab: $(STAMP)
	$(PIP_INSTALL) -r requirements-lab.txt
	$(QUICK) $(VENV)/bin/jupyter lab book

## make screenshots: PNGs of the landing page, each chapter's first page and the claims page at 1400 and 412 px
## (needs chromium; after make book-stored).
screenshots: $(STAMP)
	$(PY) tests/screenshots.py _build/html _build/screenshots

## make constraints: re-pin constraints.txt to the current venv (then make notebooks && make test).
constraints: $(STAMP)
	{ sed -n '1,/^# Regenerate/p' constraints.txt; $(PY) -m pip freeze --exclude-editable \
	  | grep -v -E '^(torch|tfbook|nvidia-|triton)[=-]|^#|^-e' | sort -f; } > constraints.tmp && mv constraints.tmp constraints.txt

clean:
	rm -rf _build
