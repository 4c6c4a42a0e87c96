"""Differential-privacy primitives: exact budgets, the secure generator and the mechanisms.

Pure numpy and standard library; no FastAPI, no SQLAlchemy. No other module samples noise.
"""
