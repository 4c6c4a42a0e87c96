"""The numba decorators of the compiled kernels, typed for mypy (``numba.njit`` is untyped).

Both release the GIL, so kernels on different columns or requests run side by side on threads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numba

__all__ = ["compiled", "inlined"]

Function = TypeVar("Function", bound=Callable[..., Any])


def compiled(function: Function) -> Function:
    """``numba.njit`` with the on-disk cache (each process loads it once, in its warm-up)."""
    jit: Callable[..., Callable[[Function], Function]] = numba.njit
    kernel: Function = jit(cache=True, nogil=True)(function)
    return kernel


def inlined(function: Function) -> Function:
    """``numba.njit`` inlined into its compiled callers: for a step called per cell or per
    node, where a call would cost more than the step."""
    jit: Callable[..., Callable[[Function], Function]] = numba.njit
    kernel: Function = jit(inline="always", nogil=True)(function)
    return kernel
