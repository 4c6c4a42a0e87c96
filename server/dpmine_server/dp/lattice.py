"""Released real numbers from a public lattice (DESIGN.md contract 6; ALGORITHMS.md §0.3, §1.4).

A threshold "uniform inside a cell whose edges are data values" must not be computed as
``v_k + (v_{k+1} − v_k)·U``: the set of floats that formula can produce depends on v_k, so the
released value can be tested against guesses of the data (Mironov's floating-point attack). The
engine instead fixes, from the public metadata alone, a lattice of 2^bits + 1 equally spaced
points of the public range [lo, hi] (strictly increasing floats, computed once from lo, hi and
bits), and every released threshold is one of these points:

* the base measure of a bound is "unbounded with probability ½, else a uniform lattice point";
  a pair (a, b) is conditioned on a ≤ b and not both unbounded (§1.4 step 3 on the lattice);
* a data-dependent cell is weighted by its exact number of lattice points (pairs of points for a
  lower and an upper bound inside one gap), so the exponential mechanism over cells is exactly
  the exponential mechanism over lattice points;
* the released value is a uniformly chosen lattice point (or ordered pair) of the chosen cell: an
  index drawn by an exact integer sampler, then a table look-up in the public lattice. No
  arithmetic ever touches a data value, so the output set is data-independent.

Cells over the distinct present values v_1 < … < v_V of a column (a lower bound x selects values
≥ x, an upper bound y values ≤ y):

* lower cell a(x) = 1 + #{v < x} ∈ 1 … V+1 (a = 0 is the "unbounded" atom);
* upper cell b(y) = #{v ≤ y} ∈ 0 … V (b = V+1 is the atom);
* a bounded pair selects the values with index in [a, b]; it has x ≤ y whenever a ≤ b, and for
  a − 1 = b exactly when x ≤ y are both strictly inside the gap (v_b, v_{b+1}).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpmine.wire import NumericAttribute
from dpmine_server.public_cache import public_cache

__all__ = [
    "DEFAULT_LATTICE_BITS",
    "UNBOUNDED",
    "LatticeCells",
    "PublicLattice",
    "draw_threshold",
    "draw_threshold_indices",
    "draw_threshold_pair",
    "draw_threshold_pair_indices",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: 2^16 + 1 points: a resolution of (hi − lo)/65,536, the default of NumericAttribute.lattice_bits.
DEFAULT_LATTICE_BITS = 16


@dataclass(frozen=True, slots=True, eq=False)
class PublicLattice:
    """Strictly increasing, data-independent points of a public range [lo, hi] (both included)."""

    lo: float
    hi: float
    points: FloatArray

    @classmethod
    def of(cls, attribute: NumericAttribute) -> PublicLattice:
        """The lattice declared by a numeric attribute's public metadata."""
        return public_lattice(attribute.lo, attribute.hi, attribute.lattice_bits)

    @property
    def size(self) -> int:
        """Number of lattice points (L)."""
        return int(self.points.size)

    def point(self, index: int) -> float:
        """The released value of lattice index ``index``: a table look-up, never arithmetic."""
        return float(self.points[index])


@public_cache(maxsize=64)
def public_lattice(lo: float, hi: float, bits: int) -> PublicLattice:
    """lo + (hi − lo)·k/2^bits for k = 0 … 2^bits, rounded monotonically, deduplicated.

    Computed from public values only (cached per (lo, hi, bits), which holds no private data).
    The half-width form cannot overflow; the clip keeps the rounded points inside [lo, hi].
    The points are already in order: each step (a positive scale, an exact doubling, adding
    lo, the clip) is monotone under round-to-nearest, so equal neighbours are the only
    duplicates and one pass removes them (what ``np.unique``'s sort gave, in O(2^bits);
    tests/dp/test_lattice.py compares the two)."""
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"a public lattice needs finite lo < hi, got [{lo}, {hi}]")
    if not 1 <= bits <= 24:
        raise ValueError(f"lattice bits must lie in 1 … 24, got {bits}")
    steps = np.arange(2**bits + 1, dtype=np.float64) / 2.0**bits  # exact dyadic fractions
    half_width = hi / 2.0 - lo / 2.0
    with np.errstate(over="ignore"):
        points = lo + (half_width * steps) * 2.0
    points = np.clip(points, lo, hi)
    points = points[np.concatenate(([True], points[1:] != points[:-1]))]
    points[0], points[-1] = lo, hi
    points.setflags(write=False)
    return PublicLattice(lo=lo, hi=hi, points=points)


def _uniform_index(start: int, stop: int, rng: np.random.Generator) -> int:
    """An exactly uniform integer of [start, stop) (numpy's unbiased bounded integers)."""
    if stop <= start:
        raise ValueError("a cell without lattice points cannot be drawn from")
    return start + int(rng.integers(stop - start))


#: The lattice index of an unbounded side in :func:`draw_threshold_pair_indices`.
UNBOUNDED = -1


def draw_threshold(lattice: PublicLattice, rng: np.random.Generator) -> float:
    """A draw from §3.1's base measure of one threshold ``A ≤ t``: a uniform lattice point."""
    return lattice.point(_uniform_index(0, lattice.size, rng))


def draw_threshold_indices(
    lattice: PublicLattice, count: int, rng: np.random.Generator
) -> IntArray:
    """``count`` independent draws of :func:`draw_threshold`, as lattice indices."""
    return np.asarray(rng.integers(0, lattice.size, size=count), dtype=np.int64)


def draw_threshold_pair(
    lattice: PublicLattice, rng: np.random.Generator
) -> tuple[float | None, float | None]:
    """A draw from §1.4's base measure on the lattice: each bound unbounded w.p. ½, else a
    uniform lattice point; conditioned on a ≤ b and not both unbounded.

    One exact integer draw in Python integers (:func:`draw_threshold_pair_indices` draws many
    at once by the same map): in units of ¼/L² (L points) the atoms (unbounded, b) and
    (a, unbounded) weigh L each and every bounded pair a ≤ b weighs 1, so a uniform
    u < 2L² + L(L+1)/2 picks (unbounded, u // L), then (u // L − L, unbounded), then the
    (u − 2L²)-th ordered pair by the triangular-number inverse."""
    size = lattice.size
    pick = _uniform_index(0, 2 * size * size + size * (size + 1) // 2, rng)
    if pick < 2 * size * size:
        index, one_sided = divmod(pick, size * size)
        point = lattice.point(one_sided // size)
        return (None, point) if index == 0 else (point, None)
    pair = pick - 2 * size * size
    high = (math.isqrt(8 * pair + 1) - 1) // 2
    low = pair - high * (high + 1) // 2
    return lattice.point(low), lattice.point(high)


def draw_threshold_pair_indices(
    lattice: PublicLattice, count: int, rng: np.random.Generator
) -> tuple[IntArray, IntArray]:
    """``count`` independent draws of :func:`draw_threshold_pair` as lattice indices (lower,
    upper), :data:`UNBOUNDED` for an unbounded side, by its map of one exact integer draw
    each. Exact in int64: L ≤ 2²⁴ + 1 (NumericAttribute.lattice_bits ≤ 24) keeps u below
    7.1·10¹⁴ and 8(u − 2L²) + 1 below 2⁵³, so the float square root is within one of the integer
    one, which the two corrections settle."""
    size = lattice.size
    square = size * size
    picks = np.asarray(
        rng.integers(0, 2 * square + size * (size + 1) // 2, size=count), dtype=np.int64
    )
    low = np.full(count, UNBOUNDED, dtype=np.int64)
    high = np.full(count, UNBOUNDED, dtype=np.int64)
    one_sided = picks < 2 * square
    side, within = np.divmod(picks[one_sided], square)
    point = within // size
    high[np.flatnonzero(one_sided)[side == 0]] = point[side == 0]
    low[np.flatnonzero(one_sided)[side == 1]] = point[side == 1]
    pair = picks[~one_sided] - 2 * square
    rank = _integer_sqrt(8 * pair + 1)
    top = (rank - 1) // 2
    low[~one_sided] = pair - top * (top + 1) // 2
    high[~one_sided] = top
    return low, high


def _integer_sqrt(values: IntArray) -> IntArray:
    """⌊√v⌋ exactly, for 0 ≤ v < 2⁵³ (the float root is off by at most one there)."""
    root = np.floor(np.sqrt(values.astype(np.float64))).astype(np.int64)
    root = np.where(root * root > values, root - 1, root)
    return np.where((root + 1) * (root + 1) <= values, root + 1, root)


@dataclass(frozen=True, slots=True, eq=False)
class LatticeCells:
    """The §1.4 cell pairs of one column's distinct values, weighted by lattice points.

    ``lower_edges[a]`` … ``lower_edges[a+1]`` and ``upper_edges[b]`` … ``upper_edges[b+1]`` are the
    lattice index ranges of lower cell a+1 and upper cell b; gap g (both bounds strictly between
    v_g and v_{g+1}) is ``lower_edges[g]`` … ``upper_edges[g+1]``."""

    lattice: PublicLattice
    lower_edges: IntArray  # [0, #{p ≤ v_1}, …, #{p ≤ v_V}, L]
    upper_edges: IntArray  # [0, #{p < v_1}, …, #{p < v_V}, L]

    @classmethod
    def build(cls, lattice: PublicLattice, values: FloatArray) -> LatticeCells:
        """Cells of the sorted distinct ``values`` (the data's; they only decide the weights)."""
        size = np.asarray([lattice.size], dtype=np.int64)
        zero = np.zeros(1, dtype=np.int64)
        return cls(
            lattice=lattice,
            lower_edges=np.concatenate(
                [zero, np.searchsorted(lattice.points, values, "right"), size]
            ),
            upper_edges=np.concatenate(
                [zero, np.searchsorted(lattice.points, values, "left"), size]
            ),
        )

    @property
    def size(self) -> int:
        """V, the number of distinct values."""
        return int(self.lower_edges.size - 2)

    def counts(self) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Lattice points per lower cell a = 0 … V+1 (0 for the atom), per upper cell
        b = 0 … V+1 (0 for the atom), and ordered point pairs x ≤ y per gap g = 0 … V+1."""
        lower = np.concatenate([[0], np.diff(self.lower_edges)]).astype(np.float64)
        upper = np.concatenate([np.diff(self.upper_edges), [0]]).astype(np.float64)
        inside = np.maximum(self.upper_edges[1:] - self.lower_edges[:-1], 0).astype(np.float64)
        gaps = np.concatenate([inside * (inside + 1.0) / 2.0, [0.0]])
        return lower, upper, gaps

    def log_mass(self, lower: IntArray) -> FloatArray:
        """Normalised log μ of the pairs (a, b) for lower cells ``lower`` (rows) and every upper
        cell b = 0 … V+1 (columns); −inf where a pair holds no lattice point."""
        size, points = self.size, float(self.lattice.size)
        n_lower, n_upper, n_gap = self.counts()
        a = lower[:, None]
        b = np.arange(size + 2)[None, :]
        lower_atom, upper_atom = a == 0, b == size + 1
        both = ~lower_atom & ~upper_atom
        # In units of 1/(4L²): ¼·n/L for one bounded side, ¼·n·m/L² for two, ¼·m(m+1)/2/L² in a gap.
        mass = np.zeros((lower.size, size + 2))
        mass = np.where(lower_atom & ~upper_atom, n_upper[b] * points, mass)
        mass = np.where(~lower_atom & upper_atom, n_lower[a] * points, mass)
        mass = np.where(both & (a <= b), n_lower[a] * n_upper[b], mass)
        mass = np.where(both & (a - 1 == b), n_gap[np.minimum(b, size + 1)], mass)
        total = 2.0 * points * points + points * (points + 1.0) / 2.0
        with np.errstate(divide="ignore"):
            return np.asarray(np.log(mass) - math.log(total), dtype=np.float64)

    def upper_log_mass(self) -> FloatArray:
        """Normalised log μ of the upper cells b = 0 … V+1 of one threshold ``A ≤ t`` uniform
        on the lattice (§3.1): log(#points in cell b / L); −inf for the atom b = V+1."""
        _lower, upper, _gaps = self.counts()
        with np.errstate(divide="ignore"):
            return np.asarray(np.log(upper) - math.log(self.lattice.size), dtype=np.float64)

    def draw(
        self, lower: int, upper: int, rng: np.random.Generator
    ) -> tuple[float | None, float | None]:
        """Released bounds of the cell pair (``lower``, ``upper``): a uniform lattice point of
        each bounded cell, or a uniform ordered pair of points when both share one gap."""
        size = self.size
        if lower == 0 and upper == size + 1:
            raise ValueError("the pair of two unbounded atoms is not a candidate")
        if lower >= 1 and upper <= size and lower - 1 == upper:
            start = int(self.lower_edges[upper])
            inside = int(self.upper_edges[upper + 1]) - start
            pick = _uniform_index(0, inside * (inside + 1) // 2, rng)
            high = (math.isqrt(8 * pick + 1) - 1) // 2  # triangular-number inverse, exact
            low = pick - high * (high + 1) // 2
            return self.lattice.point(start + low), self.lattice.point(start + high)
        if lower >= 1 and upper <= size and lower - 1 > upper:
            raise ValueError(f"cell pair ({lower}, {upper}) has no bounds with lower ≤ upper")
        low_value = None if lower == 0 else self._point_in(self.lower_edges, lower - 1, rng)
        high_value = None if upper == size + 1 else self._point_in(self.upper_edges, upper, rng)
        return low_value, high_value

    def _point_in(self, edges: IntArray, start: int, rng: np.random.Generator) -> float:
        """A uniform lattice point of indices ``edges[start]`` … ``edges[start + 1]`` − 1."""
        return self.lattice.point(_uniform_index(int(edges[start]), int(edges[start + 1]), rng))
