"""The book's machinery: everything that executes, audits, renders and measures the book, and no construction.

* execution: `notebooks` (the executor every notebook run goes through: ``make book``, ``make notebooks``,
  the tests), `repository` (the published-repository switch of ``_config.yml``);
* audit and pages: `claims_audit` (every notebook under three sabotages of the core), `audit_file` (the stored
  audit's file, shared by the audit and the pages), `nbval_baseline` (``make nbval``'s runs as the audit's runs
  without a sabotage), `claims_page`, `statements_page`, `run_page` (the generated pages);
* full-profile runs and reports: `full`, `opcount` (operation counts and the H100 estimate);
* benchmarks: `bench` (the command line; it reads each library module's ``bench_cases()``), `bench_core`
  (the cases' type, the core's cases, dense against sparse storage);
* Sphinx extensions of ``_config.yml``: `bibstyle`, `sphinx_repository`.

The rule: this subpackage may import the library (every other module of `tfbook`); no library module imports
this subpackage (``tests/test_layering.py``), and no import cycle exists in `tfbook`. Its packages (nbformat,
nbclient, psutil, ipykernel, jupyter-book) are the ``book`` extra, not the library's requirements.

Command line: ``python -m tfbook.build.<module>`` (``notebooks``, ``claims_audit``, ``claims_page``, ``full``,
``bench``).
"""
