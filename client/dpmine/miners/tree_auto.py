"""The tree miners' ``auto`` preset (issue #21): depth, rounds and the ε split between tree
draws and leaf-count releases, from public quantities and a noisy row count n̂ only.

Why. A tree result is shown only when its joint intervals pass the noise-aware test
(:mod:`dpmine.significance`); their width is the half-width of a sum of released cells at the
miss α/(R·4·L²) of :func:`dpmine.miners.trees.release_miss`. The paper's split (ε/9 per call
for AltExpM: 5 trees and R = 4 releases at depth 3) makes that half-width about one expected
leaf (mammals: 259 rows against 277 at ε = 1), so almost nothing passes. The rule buys each
call its *price* and spends the rest in proportion:

* **Tree price** (the draw is not close to uniform, :class:`~dpmine.miners.trees.TreeDrawSignal`):
  the root draw's c·R at R = n̂ is ``TREE_SIGNAL``·ln M. ``tree.expmech``: c = ε/(4d), M the
  units of the larger view, so ε ≥ 4d·2·ln M/n̂; ``tree.mcmc``: c = ε/4, M = units^(2^d − 1),
  ε ≥ 4·2·(2^d − 1)·ln units/n̂. ``tree.pair_mcmc`` has c·R = ε/2 far below ln M at any
  usable ε: its price cannot be met, so the pair draw keeps the fraction ω of its iteration.
* **Leaf price**: a leaf's expected size n̂/2^d is at least ``LEAF_RATIO`` = 4 half-widths
  of the sum of its 2^d + 1 released cells at the run's per-sum miss
  (:func:`leaf_epsilon`), so the boxes of leaf-sized sides are narrow enough for the test.
* **Choice**: among depth d ∈ {3, 2, 1} and rounds k ∈ {4, …, 1} (leaf-count releases per
  drawn attribute), the candidates whose prices fit the budget; the one releasing the most
  leaves k·2^d (each release's results come from its leaf pairs), ties to the deeper tree
  (fewer, less noisy releases). Nothing fits: d = 1, k = 1, the prices scaled down by one
  factor to the budget.
* **Surplus**: what the budget leaves over the chosen prices goes half to the tree draws and
  half to the leaf-count releases, equally per call (each call gets at least its price). The
  tree price is an upper bound of the signal (c·R with the largest gain range), far below what
  the draws need on easy data: scaling all prices by one factor (Serenade's rule, measured
  first as candidate A) starved the trees on asia (ε 0.027 per tree, 3 shown results per run
  against 20.5 with the paper's ε/9).
* min_support = max(10, 3·√2·b), b = 1/ε_leaf the per-cell scale: a noisy intersection below
  three noise standard deviations of one cell is not a result. max_clauses stays 3.

Everything here is a pure function of ε, n̂ (or the public n_max for pricing), the schema's
units and the options: post-processing, it reads no data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from dpmine.intervals import sum_half_width
from dpmine.miners._rho import PURE, Composition
from dpmine.significance import ALPHA
from dpmine.treereds import query_cell_sets
from dpmine.wire import CountNoiseKind

__all__ = [
    "AUTO_COUNT_CAP",
    "AUTO_COUNT_SHARE",
    "AUTO_DEPTHS",
    "AUTO_MAX_ROUNDS",
    "LAYERED_DEPTHS",
    "LAYERED_LAYERS",
    "LAYERED_SEEDS",
    "LEAF_RATIO",
    "STEER_RATIO",
    "STRONG_MAX_SEEDS",
    "TREE_SIGNAL",
    "LayeredAuto",
    "LayeredOrder",
    "TreeAuto",
    "TreeKind",
    "auto_layered",
    "auto_tree",
    "count_epsilon",
    "leaf_epsilon",
    "pair_epsilon",
    "steer_epsilon",
    "tree_epsilon",
]

#: The noisy row count costs this share of ε, at most ``AUTO_COUNT_CAP`` (as Serenade's auto).
AUTO_COUNT_SHARE = 0.02
AUTO_COUNT_CAP = 0.05
#: Depths and rounds the rule chooses from.
AUTO_DEPTHS = (3, 2, 1)
AUTO_MAX_ROUNDS = 4
#: A tree draw's root c·R at R = n̂ is this many times ln M.
TREE_SIGNAL = 2.0
#: An expected leaf is this many half-widths of its released row sum.
LEAF_RATIO = 4.0
#: Per-cell scale at which the half-width of a sum is read (continuous limit, see below).
_PRICING_SCALE = 1000.0
_NANO = 10**9

TreeKind = Literal["expmech", "mcmc", "pair"]


def count_epsilon(budget: float, composition: Composition = PURE) -> float:
    """ε of the noisy row count: the ε that costs ``AUTO_COUNT_SHARE`` of the budget in its unit
    (ε, or ρ at ε²/2 on a zCDP dataset, as Serenade's auto), at most ``AUTO_COUNT_CAP``, rounded
    down to a whole nano-ε."""
    share = composition.generic_epsilon(AUTO_COUNT_SHARE * budget)
    return math.floor(min(AUTO_COUNT_CAP, share) * _NANO) / _NANO


def tree_cost(kind: TreeKind, depth: int, epsilon: float, composition: Composition) -> float:
    """What one tree draw at ``epsilon`` costs, as the server charges it: ``tree.expmech`` is
    ``depth`` EM draws at ε/depth (ε pure, ε²/(8·depth) in ρ), ``tree.mcmc`` and
    ``tree.pair_mcmc`` one EM draw at ε (charged as their target)."""
    if kind == "expmech":
        return composition.em(epsilon / depth, depth)
    return composition.em(epsilon)


def tree_epsilon_for(kind: TreeKind, depth: int, cost: float, composition: Composition) -> float:
    """The ε of one tree draw that costs ``cost`` (inverse of :func:`tree_cost`)."""
    if kind == "expmech":
        return depth * composition.em_epsilon(cost / depth)
    return composition.em_epsilon(cost)


def tree_epsilon(kind: TreeKind, depth: int, log_units: float, n_rows: float) -> float:
    """ε of one tree draw whose root c·R at R = ``n_rows`` is ``TREE_SIGNAL``·ln M (module
    docstring); 0 for ``"pair"`` (its price cannot be met)."""
    if kind == "pair":
        return 0.0
    log_m = max(log_units, 1.0) * (depth if kind == "expmech" else (1 << depth) - 1)
    # expmech: c = ε/(4d) and ln M = ln units; mcmc: c = ε/4 and ln M = (2^d − 1)·ln units.
    # Both are ε·n/4 ≥ TREE_SIGNAL·d·ln units (expmech) or TREE_SIGNAL·(2^d − 1)·ln units.
    return 4.0 * TREE_SIGNAL * log_m / max(n_rows, 1.0)


def noise_of(composition: Composition) -> CountNoiseKind:
    """The noise of a leaf-count release at ε: discrete Laplace of scale 1/ε on a pure dataset,
    the discrete Gaussian of σ = 1/ε on a zCDP one (the server's ``tree.leaf_counts``)."""
    return "laplace" if composition.unit == "pure" else "discrete_gaussian"


def _cell_sd(kind: CountNoiseKind) -> float:
    """Standard deviation of one cell's noise per unit of scale (continuous limit): √2 for
    Laplace, 1 for the Gaussian."""
    return math.sqrt(2.0) if kind == "laplace" else 1.0


@lru_cache(maxsize=64)
def _unit_half_width(cells: int, miss: float, kind: CountNoiseKind = "laplace") -> float:
    """Half-width of a sum of ``cells`` discrete noises of ``kind`` per unit of scale, read at
    a large scale: the discrete law's half-width is at most the continuous one, which is linear
    in the scale, so pricing with it never buys less than the target."""
    return sum_half_width(_PRICING_SCALE, cells, miss, kind) / _PRICING_SCALE


def leaf_epsilon(
    depth: int,
    releases: int,
    max_clauses: int,
    n_rows: float,
    *,
    alpha: float = ALPHA,
    kind: CountNoiseKind = "laplace",
) -> float:
    """ε of one leaf-count release at which the half-width of a leaf's released row sum (2^d + 1
    cells of scale 1/ε, noise ``kind``) at the run's per-sum miss α/(R·4·L²) is
    n̂/(2^d·``LEAF_RATIO``)."""
    sets = query_cell_sets(1 << depth, max_clauses)
    miss = alpha / releases / (4 * sets * sets)
    target = max(n_rows, 1.0) / (1 << depth) / LEAF_RATIO
    return float(_unit_half_width((1 << depth) + 1, miss, kind)) / target


@dataclass(frozen=True)
class TreeAuto:
    """What the rule chose: depth, rounds k, ε per tree draw and per leaf-count release, the
    minimum noisy support, and whether the prices fit (False: the fallback d = 1, k = 1)."""

    depth: int
    rounds: int
    tree_epsilon: float
    leaf_epsilon: float
    min_support: float
    fits: bool

    def describe(self) -> str:
        """One line for the plan report."""
        fit = "" if self.fits else " (the prices exceed the budget: fallback, expect few results)"
        return (
            f"auto: depth {self.depth}, {self.rounds} leaf-count round(s), "
            f"ε {self.tree_epsilon:.4g} per tree draw, {self.leaf_epsilon:.4g} per leaf-count "
            "release, min_support "
            f"{self.min_support:.3g}{fit}"
        )


def auto_tree(
    budget: float,
    n_rows: float,
    *,
    kind: TreeKind,
    log_units: float,
    in_trees: int = 1,
    omega: float = 0.1,
    max_clauses: int = 3,
    depths: tuple[int, ...] = AUTO_DEPTHS,
    rounds: tuple[int, ...] = tuple(range(AUTO_MAX_ROUNDS, 0, -1)),
    prefer_rounds: bool = False,
    split_surplus: bool = True,
    composition: Composition = PURE,
) -> TreeAuto:
    """The auto choice for ``budget`` (ε minus the row count) at ``n_rows`` rows (module
    docstring). Alternation (``expmech``, ``mcmc``): ``in_trees``·(k + 1) trees and
    ``in_trees``·k releases; ``pair``: k iterations, each a pair draw (the fraction ``omega``)
    and one release. ``depths`` / ``rounds`` restrict the candidates (a given parameter).
    ``prefer_rounds``: order the candidates by rounds, then depth (candidate D, measured, not
    the default); ``split_surplus=False``: scale the prices by one factor (candidate A).

    ``composition``: the budget's unit (issue #24). On a zCDP dataset the prices follow the same
    rules (a draw's signal; a leaf's half-width, now of the discrete Gaussian of σ = 1/ε that
    the server adds, :func:`noise_of`) and a candidate fits when the ρ of its calls
    (:func:`tree_cost`, ε²/2 per leaf-count release) is within ``budget``; the surplus ρ goes
    half to the tree draws and half to the releases, equally per call, and the fallback scales
    every ε by √(budget/cost), so the run's ρ is the budget exactly."""
    if not (math.isfinite(budget) and budget > 0):
        raise ValueError(f"budget must be a positive finite number, got {budget!r}")
    noise = noise_of(composition)

    def run_cost(depth: int, k: int, tree: float, leaf: float) -> float:
        if kind == "pair":  # k iterations at ε = leaf/(1 − ω), split ω : 1 − ω
            iteration = leaf / (1.0 - omega)
            return k * (
                tree_cost(kind, depth, omega * iteration, composition) + composition.generic(leaf)
            )
        trees = in_trees * (k + 1) * tree_cost(kind, depth, tree, composition)
        return trees + composition.generic(leaf, in_trees * k)

    best: tuple[int, int, int, float, float] | None = None  # (leaves, depth, k, tree, leaf)
    for depth in depths:
        for k in rounds:
            releases = in_trees * k if kind != "pair" else k
            leaf = leaf_epsilon(depth, releases, max_clauses, n_rows, kind=noise)
            tree = 0.0 if kind == "pair" else tree_epsilon(kind, depth, log_units, n_rows)
            if run_cost(depth, k, tree, leaf) > budget:
                continue
            key = (k, depth) if prefer_rounds else (k << depth, depth)
            if best is None or key > (best[0], best[1]):
                best = (key[0], depth, k, tree, leaf)
    fits = best is not None
    if best is None:
        depth, k = min(depths), min(rounds)
        releases = in_trees * k if kind != "pair" else k
        leaf = leaf_epsilon(depth, releases, max_clauses, n_rows, kind=noise)
        tree = 0.0 if kind == "pair" else tree_epsilon(kind, depth, log_units, n_rows)
        best = (k << depth, depth, k, tree, leaf)
    _, depth, k, tree, leaf = best
    if kind == "pair":  # the iteration's ε that spends budget/k, split ω : 1 − ω
        iteration = leaf / (1.0 - omega)
        scale = composition.scaled(budget / run_cost(depth, k, 0.0, leaf))
        leaf_share = iteration * scale * (1.0 - omega)
        tree_share = iteration * scale * omega
    elif fits and split_surplus:
        surplus = budget - run_cost(depth, k, tree, leaf)
        tree_cost_each = tree_cost(kind, depth, tree, composition)
        tree_extra = surplus / 2 / (in_trees * (k + 1))
        tree_share = tree_epsilon_for(kind, depth, tree_cost_each + tree_extra, composition)
        leaf_extra = surplus / 2 / (in_trees * k)
        leaf_share = composition.generic_epsilon(composition.generic(leaf) + leaf_extra)
    else:
        scale = composition.scaled(budget / run_cost(depth, k, tree, leaf))
        tree_share, leaf_share = tree * scale, leaf * scale
    return TreeAuto(
        depth=depth,
        rounds=k,
        tree_epsilon=tree_share,
        leaf_epsilon=leaf_share,
        min_support=max(10.0, 3.0 * _cell_sd(noise) / leaf_share),
        fits=fits,
    )


# -- DPLayeredTrees (issue #26) -------------------------------------------------------------------

#: A steering leaf's expected size is this many standard deviations of its noisy positive sum.
STEER_RATIO = 4.0
#: Seeds, layers and depths the layered rule chooses from.
LAYERED_SEEDS = (4, 3, 2, 1)
LAYERED_LAYERS = (3, 2, 1)
LAYERED_DEPTHS = (3, 2)

LayeredOrder = Literal["seeds", "layers", "strong"]
#: Candidate C ("strong") keeps at most this many seeds, so each final release is strong.
STRONG_MAX_SEEDS = 2


def steer_epsilon(depth: int, n_rows: float, kind: CountNoiseKind = "laplace") -> float:
    """ε of a steering release (one that only picks the next query's leaves): the standard
    deviation √(2·(2^d + 1))/ε of a leaf's noisy positive sum (at most 2^d + 1 cells of scale
    1/ε; √(2^d + 1)/ε with the Gaussian) is the expected leaf n̂/2^d over ``STEER_RATIO``, so
    the noise seldom flips a leaf whose true share is far from 1/2."""
    leaves = 1 << depth
    return STEER_RATIO * leaves * _cell_sd(kind) * math.sqrt(leaves + 1) / max(n_rows, 1.0)


def pair_epsilon(
    depth: int,
    seeds: int,
    n_rows: float,
    alpha: float = ALPHA,
    *,
    kind: CountNoiseKind = "laplace",
) -> float:
    """ε of one chain's final pair release (``final_release="pair"``: the four cells of the
    chain's last pair of queries, one noise term each, of ``kind``): the half-width of one cell
    at the miss α/(4·s) (the four cells of each of the s releases) is the expected leaf
    n̂/2^d over ``LEAF_RATIO``, the price :func:`leaf_epsilon` sets for a leaf's sum."""
    miss = alpha / max(seeds, 1) / 4
    target = max(n_rows, 1.0) / (1 << depth) / LEAF_RATIO
    return float(_unit_half_width(1, miss, kind)) / target


@dataclass(frozen=True)
class LayeredAuto:
    """The layered rule's choice: seeds and layers per run, depth, ε per tree draw, per
    steering release (layers 1 … L − 1) and per final release (layer L, the only one whose
    results are examined), the minimum noisy support, and whether the prices fit."""

    seeds: int
    layers: int
    depth: int
    tree_epsilon: float
    steer_epsilon: float
    final_epsilon: float
    min_support: float
    fits: bool

    def describe(self) -> str:
        """One line for the plan report."""
        fit = "" if self.fits else " (the prices exceed the budget: fallback, expect few results)"
        return (
            f"auto: {self.seeds} seed(s) of {self.layers} layer(s), depth {self.depth}, "
            f"ε {self.tree_epsilon:.4g} per tree draw, {self.steer_epsilon:.4g} per steering "
            f"release, {self.final_epsilon:.4g} per final release, min_support "
            f"{self.min_support:.3g}{fit}"
        )


def _layered_cost(
    seeds: int,
    layers: int,
    tree: float,
    steer: float,
    final: float,
    *,
    seed_draws: int,
    pair: bool = False,
    depth: int = 1,
    composition: Composition = PURE,
) -> float:
    """What a run costs: per seed, ``layers`` trees of ``depth`` and ``seed_draws`` depth-1
    seed trees at ``tree`` (:func:`tree_cost`), its steering releases (every layer's under
    ``pair``, else all but the last) and its final release (ε²/2 each in ρ)."""
    steering = layers - (0 if pair else 1)
    return seeds * (
        _seed_trees_cost(layers, tree, seed_draws, depth, composition)
        + composition.generic(steer, steering)
        + composition.generic(final)
    )


def _seed_trees_cost(
    layers: int, tree: float, seed_draws: int, depth: int, composition: Composition
) -> float:
    """The tree draws of one seed at ``tree`` each: ``layers`` of ``depth``, ``seed_draws`` of 1."""
    return layers * tree_cost("expmech", depth, tree, composition) + seed_draws * tree_cost(
        "expmech", 1, tree, composition
    )


def _final_price(
    depth: int, seeds: int, n_rows: float, *, pair: bool, kind: CountNoiseKind = "laplace"
) -> float:
    """Price of a seed's final release: :func:`pair_epsilon` or :func:`leaf_epsilon`, with the
    noise ``kind`` the release will carry."""
    if pair:
        return pair_epsilon(depth, seeds, n_rows, kind=kind)
    return leaf_epsilon(depth, seeds, 1 << depth, n_rows, kind=kind)


def auto_layered(
    budget: float,
    n_rows: float,
    *,
    log_units: float,
    order: LayeredOrder = "strong",
    seeds: tuple[int, ...] = LAYERED_SEEDS,
    layers: tuple[int, ...] = LAYERED_LAYERS,
    depths: tuple[int, ...] = LAYERED_DEPTHS,
    seed_draws: int = 0,
    pair: bool = False,
    composition: Composition = PURE,
) -> LayeredAuto:
    """The layered auto choice for ``budget`` (ε minus the row count) at ``n_rows`` rows.

    A run is s seeds of L layers: L ``tree.expmech`` draws (price :func:`tree_epsilon`), L − 1
    steering releases that only choose the next query (price :func:`steer_epsilon`) and one
    final release whose partition is examined (price :func:`leaf_epsilon` at R = s releases,
    every set of leaves a query: max_clauses = 2^d). Among the (s, L, d) whose prices fit, the
    first by ``order``: ``"seeds"`` most seeds, then layers, then depth (candidate A);
    ``"layers"`` most layers, then seeds, then depth (candidate B); ``"strong"`` at most
    ``STRONG_MAX_SEEDS`` seeds, most layers, then depth, then seeds (candidate C: fewer,
    stronger final releases; the default, chosen on the whole declared grid). The surplus goes
    half to the final releases and half to the tree draws, equally per call; the steering
    releases keep their price. Nothing fits: the fewest seeds and layers and the smallest
    depth, the prices scaled down by one factor. ``seeds`` / ``layers`` / ``depths`` restrict
    the candidates (given parameters, kept by the fallback too). ``seed_draws`` = 1: each seed
    is itself a tree draw (candidate D's selected seeds), priced and paid as one more tree.
    ``pair``: ``final_release="pair"``, every layer's release steers and each seed's final
    release is its last pair of queries (price :func:`pair_epsilon`).
    ``composition``: the budget's unit (issue #24): on a zCDP dataset the same ε prices (the
    releases' under the discrete Gaussian), fitted and topped up in ρ (:func:`auto_tree`).
    Pure function of public values and n̂."""
    if not (math.isfinite(budget) and budget > 0):
        raise ValueError(f"budget must be a positive finite number, got {budget!r}")
    noise = noise_of(composition)
    best: tuple[tuple[int, int, int], int, int, int] | None = None
    for depth in depths:
        for count in seeds:
            for layer in layers:
                cost = _layered_cost(
                    count,
                    layer,
                    tree_epsilon("expmech", depth, log_units, n_rows),
                    steer_epsilon(depth, n_rows, noise),
                    _final_price(depth, count, n_rows, pair=pair, kind=noise),
                    seed_draws=seed_draws,
                    pair=pair,
                    depth=depth,
                    composition=composition,
                )
                if order == "strong" and count > STRONG_MAX_SEEDS:
                    continue
                key = {
                    "seeds": (count, layer, depth),
                    "layers": (layer, count, depth),
                    "strong": (layer, depth, count),
                }[order]
                if cost <= budget and (best is None or key > best[0]):
                    best = (key, count, layer, depth)
    fits = best is not None
    if best is None:
        best = ((0, 0, 0), min(seeds), min(layers), min(depths))
    _, count, layer, depth = best
    tree = tree_epsilon("expmech", depth, log_units, n_rows)
    steer = steer_epsilon(depth, n_rows, noise)
    final = _final_price(depth, count, n_rows, pair=pair, kind=noise)
    cost = _layered_cost(
        count,
        layer,
        tree,
        steer,
        final,
        seed_draws=seed_draws,
        pair=pair,
        depth=depth,
        composition=composition,
    )
    if fits:  # half the surplus to each seed's tree draws, half to its final release
        extra = (budget - cost) / 2 / count
        trees = _seed_trees_cost(layer, tree, seed_draws, depth, composition)
        tree *= composition.scaled((trees + extra) / trees)
        released = composition.generic(final)
        final *= composition.scaled((released + extra) / released)
    else:
        scale = composition.scaled(budget / cost)
        tree, steer, final = (price * scale for price in (tree, steer, final))
    return LayeredAuto(
        seeds=count,
        layers=layer,
        depth=depth,
        tree_epsilon=tree,
        steer_epsilon=steer,
        final_epsilon=final,
        min_support=max(10.0, 3.0 * _cell_sd(noise) / final),
        fits=fits,
    )
