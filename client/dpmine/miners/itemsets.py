"""``TopKItemsets``: private top-K frequent itemsets (ALGORITHMS.md §4), and association rules
derived from the released itemsets by post-processing.

An itemset's noisy count counts the rows holding every item; :func:`itemset_query` writes it as
the query with exactly those rows (``[A]`` for a Boolean attribute or an item, ``[A = c]`` for
the item ``A=c``: false on a row where A is missing, as the count has it).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from itertools import combinations
from pathlib import Path
from typing import Literal

from dpmine.connection import DatasetHandle
from dpmine.errors import ParameterError
from dpmine.miners._base import BaseMiner, NotMinedError, _Spent
from dpmine.queries import format_query
from dpmine.wire import (
    COUNT_NOISY,
    FIM_TOPK_EM,
    FIM_TOPK_LAPLACE,
    AnyLiteral,
    BooleanAttribute,
    BoolLiteral,
    CategoricalAttribute,
    CatLiteral,
    DatasetMetadata,
    NoisyCountRequest,
    NoisyCountResponse,
    Operation,
    PlannedCall,
    TopKItemsetsRequest,
    TopKItemsetsResponse,
)
from dpmine.wire.queries import And, Expr

__all__ = [
    "AssociationRule",
    "MinedItemset",
    "TopKItemsets",
    "association_rules",
    "item_literals",
    "itemset_query",
]

_METHODS = {"em": FIM_TOPK_EM, "laplace": FIM_TOPK_LAPLACE}


@dataclass(frozen=True)
class MinedItemset:
    """A released itemset: items, noisy count (if asked) and noisy frequency (if asked), and
    the query text whose rows the count counts (:func:`itemset_query`; None when an item name
    is ambiguous in the schema)."""

    rank: int
    items: tuple[str, ...]
    noisy_count: int | None
    noisy_frequency: float | None
    query: str | None = None


def item_literals(schema: DatasetMetadata) -> dict[str, AnyLiteral | None]:
    """The literal of every item name of the server's item universe (§4.1): an item of
    transaction data or a Boolean attribute ``A`` is ``[A]``, the item ``A=c`` of a categorical
    attribute ``[A = c]``. A name that two items share (an attribute ``a=b`` with category
    ``c`` and an attribute ``a`` with category ``b=c``) maps to None."""
    if schema.kind == "transactions":
        return {item: BoolLiteral(attribute=item) for item in schema.items}
    found: dict[str, AnyLiteral | None] = {}

    def add(name: str, literal: AnyLiteral) -> None:
        found[name] = None if name in found else literal

    for attribute in schema.attributes:
        if isinstance(attribute, BooleanAttribute):
            add(attribute.name, BoolLiteral(attribute=attribute.name))
        elif isinstance(attribute, CategoricalAttribute):
            for category in attribute.categories:
                add(
                    f"{attribute.name}={category}",
                    CatLiteral(attribute=attribute.name, category=category),
                )
    return found


def itemset_query(items: Sequence[str], schema: DatasetMetadata) -> Expr | None:
    """The conjunction of the items' literals: the rows the itemset's count counts (None when
    an item name is ambiguous or unknown)."""
    literals = item_literals(schema)
    terms = [literals.get(item) for item in items]
    chosen = [term for term in terms if term is not None]
    if not chosen or len(chosen) != len(terms):
        return None
    return chosen[0] if len(chosen) == 1 else And(terms=list(chosen))


@dataclass(frozen=True)
class AssociationRule:
    """X → Y from released noisy counts only (post-processing; no budget, no data)."""

    antecedent: tuple[str, ...]
    consequent: tuple[str, ...]
    noisy_support: int
    confidence: float
    lift: float | None


class TopKItemsets(BaseMiner):
    """The K most frequent itemsets of length ``length`` (or ``(min, max)``), privately.

    ``method="em"`` (Bhaskar et al. Algorithm 1) or ``"laplace"`` (Algorithm 2); ``epsilon`` is
    the cost of the selection (+ counts when ``with_counts``). ``frequency_epsilon`` > 0 buys a
    separate noisy row count to turn counts into frequencies.
    """

    def __init__(
        self,
        *,
        k: int = 10,
        length: int | tuple[int, int] = 3,
        epsilon: float = 1.4,
        method: Literal["em", "laplace"] = "em",
        rho: float = 0.1,
        with_counts: bool = True,
        count_share: float = 0.5,
        frequency_epsilon: float = 0.0,
    ) -> None:
        self.k = k
        self.length = length
        self.epsilon = epsilon
        self.method = method
        self.rho = rho
        self.with_counts = with_counts
        self.count_share = count_share
        self.frequency_epsilon = frequency_epsilon

    def _request(self) -> TopKItemsetsRequest:
        low, high = self.length if isinstance(self.length, tuple) else (self.length, self.length)
        return TopKItemsetsRequest(
            k=self.k,
            min_length=low,
            max_length=high,
            epsilon=self.epsilon,
            rho=self.rho,
            with_counts=self.with_counts,
            count_share=self.count_share,
        )

    def _operation(self) -> Operation[TopKItemsetsRequest, TopKItemsetsResponse]:
        if self.method not in _METHODS:
            raise ParameterError(f"method must be 'em' or 'laplace', got {self.method!r}")
        return _METHODS[self.method]

    def _calls(self, dataset: DatasetHandle) -> list[PlannedCall]:
        del dataset
        calls = [self._operation().plan(self._request())]
        if self.frequency_epsilon > 0:
            count = NoisyCountRequest(epsilon=self.frequency_epsilon)
            calls.append(COUNT_NOISY.plan(count))
        return calls

    def mine(self, dataset: DatasetHandle) -> TopKItemsets:
        """Run the plan (refused up front if the budget cannot cover it)."""
        self._check_budget(dataset)
        spent = _Spent()
        released = dataset.run(self._request(), operation=self._operation().name)
        spent.receipts.append(released.receipt)
        n_hat: int | None = None
        if self.frequency_epsilon > 0:
            count: NoisyCountResponse = dataset.count(epsilon=self.frequency_epsilon)
            spent.receipts.append(count.receipt)
            n_hat = max(count.count, 1)
        queries = [itemset_query(entry.items, dataset.schema) for entry in released.itemsets]
        self.itemsets_ = [
            MinedItemset(
                rank=rank,
                items=tuple(entry.items),
                noisy_count=entry.noisy_count,
                noisy_frequency=None
                if entry.noisy_count is None or n_hat is None
                else max(entry.noisy_count, 0) / n_hat,
                query=None if query is None else format_query(query),
            )
            for rank, (entry, query) in enumerate(
                zip(released.itemsets, queries, strict=True), start=1
            )
        ]
        self.noisy_row_count_ = n_hat
        self._spent = spent
        return self

    def _mined(self) -> list[MinedItemset]:
        itemsets: list[MinedItemset] | None = getattr(self, "itemsets_", None)
        if itemsets is None:
            raise NotMinedError("TopKItemsets has not mined yet; call mine() first")
        return itemsets

    def rules(self, *, min_confidence: float = 0.5) -> list[AssociationRule]:
        """Association rules among the released itemsets (post-processing of noisy counts)."""
        return association_rules(
            self._mined(), min_confidence=min_confidence, n_rows=self.noisy_row_count_
        )

    def to_json(self, path: Path) -> None:
        """Write the itemsets and the receipts as JSON."""
        payload = {
            "itemsets": [asdict(itemset) for itemset in self._mined()],
            "receipts": [receipt.model_dump(mode="json") for receipt in self.receipts_],
        }
        path.write_text(json.dumps(payload, indent=2) + "\n")

    def to_csv(self, path: Path) -> None:
        """Write the itemsets as CSV (items joined with ' & ', and the query text)."""
        with path.open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["rank", "items", "noisy_count", "noisy_frequency", "query"])
            for itemset in self._mined():
                writer.writerow(
                    [
                        itemset.rank,
                        " & ".join(itemset.items),
                        "" if itemset.noisy_count is None else itemset.noisy_count,
                        "" if itemset.noisy_frequency is None else f"{itemset.noisy_frequency:.6g}",
                        itemset.query or "",
                    ]
                )


def association_rules(
    itemsets: list[MinedItemset], *, min_confidence: float = 0.5, n_rows: int | None = None
) -> list[AssociationRule]:
    """Rules X → Z - X for released itemsets Z and released proper subsets X, with
    confidence ĉ(Z)/ĉ(X) and, when Z - X and a noisy row count are released, lift.

    Only released noisy values are used (clamped at 0), so this costs no budget; the figures are
    as noisy as the counts they come from.
    """
    counts = {
        frozenset(s.items): max(s.noisy_count, 0) for s in itemsets if s.noisy_count is not None
    }
    rules: list[AssociationRule] = []
    for whole, support in counts.items():
        for size in range(1, len(whole)):
            for antecedent in combinations(sorted(whole), size):
                base = counts.get(frozenset(antecedent))
                if not base:
                    continue
                confidence = min(support / base, 1.0)
                if confidence < min_confidence:
                    continue
                consequent = tuple(sorted(whole - set(antecedent)))
                consequent_count = counts.get(frozenset(consequent))
                lift = (
                    confidence / (consequent_count / n_rows)
                    if consequent_count and n_rows
                    else None
                )
                rules.append(
                    AssociationRule(
                        antecedent=antecedent,
                        consequent=consequent,
                        noisy_support=support,
                        confidence=confidence,
                        lift=lift,
                    )
                )
    rules.sort(key=lambda rule: (-rule.confidence, -rule.noisy_support))
    return rules
