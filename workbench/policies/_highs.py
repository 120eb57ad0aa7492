"""A quiet ``highspy.Highs`` factory.

HiGHS prints its banner to the process's standard output (at the C level) the first time a
``Highs`` object is made, whatever ``output_flag`` says afterwards. That would corrupt the
CLI's ``--json`` output, so the first construction runs with file descriptor 1 pointed at
``/dev/null``.
"""

from __future__ import annotations

import os
import sys
import threading

import highspy

_lock = threading.Lock()
_bannered = False


def new_highs() -> highspy.Highs:
    """A ``Highs`` object with its log switched off and no banner on stdout."""
    global _bannered
    with _lock:
        if _bannered:
            h = highspy.Highs()
        else:
            sys.stdout.flush()
            saved = os.dup(1)
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, 1)
                h = highspy.Highs()
            finally:
                os.dup2(saved, 1)
                os.close(saved)
                os.close(devnull)
            _bannered = True
    h.setOptionValue("output_flag", False)
    return h
