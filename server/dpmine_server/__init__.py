"""dpmine trusted server: FastAPI app, budget ledger, datasets, DP mechanisms and operations."""

__version__ = "0.1.0"
