"""The time budgets measured at a server's first start (issue #23, item 1).

With ``DPMINE_TIMING_CALIBRATION=auto`` (production's default) the first serving process to
start on a data folder runs the quick calibration of ``dpmine-server calibrate``
(services/calibration.py: every priced kernel on synthetic adversarial tables of 5,000 rows,
twice per case) before it serves, and writes the result to ``<DPMINE_DATA_DIR>/``
:data:`~dpmine_server.settings.AUTO_CALIBRATION_FILE`; every later start, and every worker
process on the same folder, reads that file. The base stays ``DPMINE_TIMING_BASE_MS`` (the
request path is measured only by ``dpmine-server calibrate``, which starts a second server).

Privacy: the calibration reads no registered dataset (fixed seeds, public sizes), so the file
and the budgets derived from it are public values, as for ``dpmine-server calibrate``. A file
lock makes processes starting together on one folder measure once: the others wait for it and
read the same file, so that every process prices a request alike. A file in the folder that an
older calibration method measured (a lower ``version``) is measured again at the next start.
"""

from __future__ import annotations

import fcntl
import json
import logging
from collections.abc import Sequence
from pathlib import Path

from dpmine_server.services.calibration import QUICK_REPEATS, QUICK_SIZES, calibrate
from dpmine_server.services.calibration_file import (
    CALIBRATION_VERSION,
    cached_calibration,
    write_calibration,
)
from dpmine_server.services.timing import PRICED_OPERATIONS
from dpmine_server.services.warmup import freeze_heap, warm_compiled_kernels
from dpmine_server.settings import Settings

__all__ = ["ensure_first_start_calibration"]

logger = logging.getLogger(__name__)


def ensure_first_start_calibration(
    settings: Settings,
    *,
    sizes: Sequence[int] = QUICK_SIZES,
    repeats: int = QUICK_REPEATS,
    operations: Sequence[str] = PRICED_OPERATIONS,
) -> Path | None:
    """The calibration file that ``DPMINE_TIMING_CALIBRATION=auto`` names, measured now if no
    process has measured it yet (module docstring); None when the setting is not ``auto`` or
    padding is off (nothing to budget). ``sizes``, ``repeats`` and ``operations``: the synthetic
    tables' rows, the timed calls per case and the operations timed (the quick calibration's,
    every priced operation, by default; the others keep their hand-set estimates)."""
    path = settings.calibration_file
    if settings.timing_calibration != "auto" or path is None or not settings.timing_padding:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.with_name(path.name + ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if path.exists():
            if not _older_method(path):
                return path
            logger.warning(
                "%s was measured by an older calibration method: measuring it again", path
            )
        logger.warning(
            "first start: measuring this machine's time budgets (the quick calibration of "
            "dpmine-server calibrate, about a minute; later starts read %s)",
            path,
        )
        warm_compiled_kernels()
        freeze_heap()  # as a serving process times its kernels
        result = calibrate(sizes, repeats, quick=True, operations=operations)
        write_calibration(result, path)
        cached_calibration.cache_clear()
        logger.warning("first start: time budgets measured and written to %s", path)
        return path


def _older_method(path: Path) -> bool:
    """Whether the file at ``path`` declares a calibration version older than this server's
    (:data:`~dpmine_server.services.calibration_file.CALIBRATION_VERSION`): the folder's own
    file, measured by an older method, is measured again. A file that cannot be read is kept,
    for the server's start to report what is wrong with it."""
    try:
        version = json.loads(path.read_text(encoding="utf-8")).get("version")
    except (OSError, ValueError, AttributeError):
        return False
    return isinstance(version, int) and version < CALIBRATION_VERSION
