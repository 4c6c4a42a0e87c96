"""dpmine trusted server: FastAPI app, budget ledger, datasets, DP mechanisms and operations.

Time is an output (DESIGN.md contract item 7): every kernel must finish within a padding budget
priced from public values. Multi-threaded BLAS makes that time depend on what else the machine
runs (small matrix products measured 4–6× slower on 2 busy cores, enough to overrun), so a
server process uses one BLAS/OpenMP thread unless its operator sets these variables. They are
set here, before anything imports numpy, because BLAS reads them when it loads.
"""

import os

for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

__version__ = "0.1.0"
