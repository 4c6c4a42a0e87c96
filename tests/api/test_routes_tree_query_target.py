"""The query target of ``tree.expmech`` (ALGORITHMS.md §3.2–§3.3) through the HTTP API
in-process: a right-view query given as text grows a left tree and is charged once; a query that
does not fit the metadata or uses the tree's own view is a 422 that says what to fix, before any
charge."""

from __future__ import annotations

import pytest

import dpmine
from dpmine.errors import InvalidRequestError
from dpmine.wire import QueryTarget, TreeExpMechRequest


def test_a_query_target_grows_a_tree_on_the_other_view(
    analyst: dpmine.Connection, toy: str
) -> None:
    target = QueryTarget(query="[member] | [color = red]")
    grown = analyst.run(toy, TreeExpMechRequest(view="left", target=target, depth=1, epsilon=0.5))
    assert (grown.tree.view, grown.tree.depth) == ("left", 1)
    assert grown.tree.splits[0].attribute in {"age", "smoker"}
    assert grown.receipt.guarantee == "pure"
    assert grown.receipt.epsilon_exact == "0.5"
    assert analyst.dataset(toy).budget().remaining_epsilon == 4.5


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("[smoker]", "may only use right-view attributes"),
        ("[color = purple]", "purple"),
        ("[height <= 3]", "unknown attribute 'height'"),
    ],
)
def test_a_query_target_that_does_not_fit_is_refused_before_the_charge(
    analyst: dpmine.Connection, toy: str, query: str, message: str
) -> None:
    request = TreeExpMechRequest(view="left", target=QueryTarget(query=query), epsilon=0.5)
    with pytest.raises(InvalidRequestError, match=message):
        analyst.run(toy, request)
    assert analyst.dataset(toy).budget().remaining_epsilon == 5.0
