# Two commands: `make book` and `make test`. Both create .venv on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
NOTEBOOKS := $(shell find book -name '*.ipynb' -not -path '*/.ipynb_checkpoints/*' | sort)

.PHONY: test unit nbval book book-stored notebooks bench clean

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt -e .
	touch $(STAMP)

## make test: unit tests, then every notebook compared with its stored outputs (quick profile).
test: unit nbval

unit: $(STAMP)
	TFBOOK_PROFILE=quick $(PY) -m pytest -q -p no:cacheprovider tests

nbval: $(STAMP)
	TFBOOK_PROFILE=quick $(PY) -m pytest -q --nbval --nbval-current-env \
	    --nbval-sanitize-with tests/nbval_sanitize.cfg -p no:cacheprovider $(NOTEBOOKS)

## make book: build the HTML book in _build/html, executing every notebook.
book: $(STAMP)
	$(VENV)/bin/jupyter-book build . --keep-going

## make book-stored: build from the stored outputs (no execution), warnings as errors (CI).
book-stored: $(STAMP)
	mkdir -p _build
	sed 's/execute_notebooks: force/execute_notebooks: "off"/' _config.yml > _build/_config_stored.yml
	$(VENV)/bin/jupyter-book build . --config _build/_config_stored.yml -W -n --keep-going

## make notebooks: re-execute every notebook in place (quick profile) and store its outputs.
notebooks: $(STAMP)
	TFBOOK_PROFILE=quick $(PY) -m tfbook.notebooks execute $(NOTEBOOKS)

bench: $(STAMP)
	$(PY) -m tfbook.bench

clean:
	rm -rf _build
