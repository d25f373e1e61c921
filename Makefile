# Two entry points, each self-installing: `make demo` (the main job on a default example)
# and `make test` (the test suite). Both create .venv on first use.
PY := .venv/bin/python
VENV_STAMP := .venv/.installed

$(VENV_STAMP): pyproject.toml
	python3 -m venv .venv
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[test,hf]"
	touch $(VENV_STAMP)

.PHONY: demo test test-extended bench-quick clean
demo: $(VENV_STAMP)
	.venv/bin/remat demo

test: $(VENV_STAMP)
	$(PY) -m pytest -n 2 --dist worksteal -m "not extended" tests

# the minute-long end-to-end checks `make test` leaves out (tests marked `extended`)
test-extended: $(VENV_STAMP)
	$(PY) -m pytest -n 2 --dist worksteal -m extended tests

bench-quick: $(VENV_STAMP)
	.venv/bin/remat bench --suite quick

clean:
	rm -rf .venv build src/*.egg-info
