"""The numba decorators of the compiled kernels, typed for mypy (``numba.njit`` is untyped),
and the stop flag that a long compiled loop reads.

Both decorators release the GIL, so kernels on different columns or requests run side by side
on threads. A compiled call cannot be interrupted from outside: a kernel whose single call can
run long (the itemset miner's traversal) reads :func:`stop_flag` between its steps and returns
early once it is set. The flag is set by the request's release guard when its padded deadline
expires (services/release_guard.py), after which the kernel's result is discarded anyway.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TypeVar

import numba
import numpy as np
import numpy.typing as npt

__all__ = [
    "STOP_FLAG",
    "StopFlag",
    "compiled",
    "compiled_counted_free",
    "inlined",
    "inlined_counted_free",
    "kernel_input",
    "popcount",
    "stop_flag",
]

Function = TypeVar("Function", bound=Callable[..., Any])
#: One cell: non-zero asks a compiled loop to return early (its result is discarded).
StopFlag = npt.NDArray[np.uint8]
#: The stop flag of the kernel running in this context (set by the release guard around the
#: kernel proper; unset outside a padded request).
STOP_FLAG: ContextVar[StopFlag | None] = ContextVar("dpmine_stop_flag", default=None)


def stop_flag() -> StopFlag:
    """The stop flag of the kernel running in this context, or a fresh one that is never set
    (a kernel outside a padded request, a test)."""
    flag = STOP_FLAG.get()
    return flag if flag is not None else np.zeros(1, dtype=np.uint8)


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


def compiled_counted_free(function: Function) -> Function:
    """:func:`compiled` without numba's reference counting of arrays (``_nrt=False``), for a
    kernel that allocates nothing: every array it touches is an argument (the itemset miner's
    traversal, the CSV cell scans). With counting on, each array taken out of a tuple argument
    inside the loop is counted up and down (an atomic operation each), which cost the cell
    scans most of their time."""
    jit: Callable[..., Callable[[Function], Function]] = numba.njit
    kernel: Function = jit(cache=True, nogil=True, _nrt=False)(function)
    return kernel


def inlined_counted_free(function: Function) -> Function:
    """:func:`inlined` for the steps of a :func:`compiled_counted_free` kernel."""
    jit: Callable[..., Callable[[Function], Function]] = numba.njit
    kernel: Function = jit(inline="always", nogil=True, _nrt=False)(function)
    return kernel


def kernel_input(array: npt.ArrayLike, dtype: type[np.generic]) -> npt.NDArray[Any]:
    """``array`` as a writeable, C-contiguous array of ``dtype`` (a copy only when it is not
    one already): numba compiles a kernel once per argument type, and a read-only or strided
    array is another type, which the warm-up would not have loaded (a compilation of seconds
    inside a padded call)."""
    converted = np.ascontiguousarray(array, dtype=dtype)
    return converted if converted.flags.writeable else converted.copy()


_ONE = np.uint64(1)
_M1 = np.uint64(0x5555555555555555)
_M2 = np.uint64(0x3333333333333333)
_M4 = np.uint64(0x0F0F0F0F0F0F0F0F)
_H01 = np.uint64(0x0101010101010101)
_S2 = np.uint64(2)
_S4 = np.uint64(4)
_S56 = np.uint64(56)


@compiled
def popcount(word: np.uint64) -> np.int64:
    """Set bits of one word (SWAR; LLVM emits the popcount instruction for it), for the
    compiled kernels that count packed rows."""
    word = word - ((word >> _ONE) & _M1)
    word = (word & _M2) + ((word >> _S2) & _M2)
    word = (word + (word >> _S4)) & _M4
    return np.int64((word * _H01) >> _S56)
