"""Importers of public formats (grid signals, tariffs, job traces, latency matrices).

Every reader raises :class:`InputError` (a ``ValueError``) naming the file, the line and
column, what is wrong and how to fix it; every import writes in one transaction.
"""

from workbench.io.errors import InputError
from workbench.io.grid import GRID_FORMATS, GridImport, import_grid, read_grid, write_grid
from workbench.io.jobs import (
    JOB_FORMATS,
    JobImport,
    import_jobs,
    job_sets,
    load_job_set,
    read_jobs,
)
from workbench.io.latency import latency_ms, read_latency_matrix

__all__ = [
    "GRID_FORMATS",
    "JOB_FORMATS",
    "GridImport",
    "InputError",
    "JobImport",
    "import_grid",
    "import_jobs",
    "job_sets",
    "latency_ms",
    "load_job_set",
    "read_grid",
    "read_jobs",
    "read_latency_matrix",
    "write_grid",
]
