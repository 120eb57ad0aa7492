"""The workbench web app: ``panel serve apps/workbench.py --address 127.0.0.1`` (or
``workbench serve``).

The store defaults to ``./workbench.duckdb``; pick another with
``panel serve apps/workbench.py --address 127.0.0.1 --warm --args --db PATH`` (or
``workbench serve --db PATH``). ``--warm`` runs this script once at start, so the scenario is
read into the cache every session shares before the first visitor comes (``workbench serve``
does that itself). Like ``workbench serve``, it refuses to serve beyond this machine without
authentication (``--basic-auth``/``--oauth-provider`` with ``--cookie-secret``): Bokeh
listens on every interface unless ``--address`` says otherwise. With ``--warm`` it refuses
at start, else at the first visit; either way the server stops, exit status 2.
"""

import argparse
import os
import sys
from pathlib import Path

# `panel serve` puts this file's folder first on sys.path, where this file would shadow
# the `workbench` package it serves: take the folder off before importing the package.
_APPS = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _APPS]

from workbench.cli.serve import refuse_exposure  # noqa: E402

refuse_exposure(sys.orig_argv, os.environ)

import panel as pn  # noqa: E402

from workbench.app import create_app  # noqa: E402

pn.extension("tabulator")

_parser = argparse.ArgumentParser(prog="apps/workbench.py")
_parser.add_argument("--db", default="workbench.duckdb", help="DuckDB store file")
_args, _ = _parser.parse_known_args(sys.argv[1:])

create_app(_args.db).template().servable(title="Workbench")
