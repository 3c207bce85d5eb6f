"""Loaded by every Python process of a benchmark's Ray run (PYTHONPATH): with
TAGGER_BENCH_LOG_DIR set, tagger.ray's debug lines go to a file per process there, each
stamped with the monotonic clock and the process id (bench/ray_limiter.py reads them)."""

import logging
import os
import time

_where = os.environ.get("TAGGER_BENCH_LOG_DIR")
if _where:

    class _Stamped(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            return f"{time.monotonic():.4f} {os.getpid()} {record.getMessage()}"

    _handler = logging.FileHandler(os.path.join(_where, f"{os.getpid()}.log"))
    _handler.setFormatter(_Stamped())
    _logger = logging.getLogger("tagger.ray")
    _logger.setLevel(logging.DEBUG)
    _logger.addHandler(_handler)
