"""Public items as short text with exactly their rows (issue #21), shared by the rule-list and
itemset displays.

A numeric item is a public bin (:func:`dpmine.wire.items.numeric_bins_of`) whose upper bound
is the float just below the next cut-point c: it prints as 17 digits, and rounding would move
it onto c, a value of the next bin. :func:`items_display` writes it as the strict bound
``![c <= A]`` (present and A < c) and leaves out a bound at an end of the public range, which
every present (clipped) value meets, when another literal keeps the missing rows out: the bins
of ``age`` on [0, 100] with cut-points 25 and 50 read ``![25.0 <= age]``,
``[25.0 <= age] & ![50.0 <= age]`` and ``[50.0 <= age]``. Other items print as they are.
Pure text work on public values: no data, no budget.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from dpmine.queries import format_query
from dpmine.wire import AnyLiteral, DatasetMetadata, NumericAttribute, NumLiteral

__all__ = ["items_display", "short_exact"]


def items_display(items: Sequence[AnyLiteral], schema: DatasetMetadata) -> str:
    """The conjunction of ``items`` as short text holding exactly their rows (module
    docstring)."""
    return " & ".join(
        format_query(literal) for item in items for literal in short_exact(item, schema)
    )


def short_exact(item: AnyLiteral, schema: DatasetMetadata) -> list[AnyLiteral]:
    """``item`` as literals with the same rows and shorter bounds: a numeric bin's upper bound
    just below a cut-point becomes a strict ``![c <= A]``, and a bound at an end of the public
    range is left out while another bound keeps the missing rows out. Any other item is
    returned as it is."""
    if not isinstance(item, NumLiteral) or item.negated or schema.kind == "transactions":
        return [item]
    attribute = schema.attribute(item.attribute)
    if not isinstance(attribute, NumericAttribute):
        return [item]
    lower, upper, strict_upper = item.lower, item.upper, None
    if upper is not None and upper < attribute.hi:
        above = math.nextafter(upper, math.inf)
        if len(repr(above)) < len(repr(upper)):
            upper, strict_upper = None, above
    if lower is not None and lower <= attribute.lo and (upper, strict_upper) != (None, None):
        lower = None
    if upper is not None and upper >= attribute.hi and lower is not None:
        upper = None
    literals: list[AnyLiteral] = []
    if lower is not None or upper is not None:
        literals.append(NumLiteral(attribute=item.attribute, lower=lower, upper=upper))
    if strict_upper is not None:
        literals.append(NumLiteral(attribute=item.attribute, lower=strict_upper, negated=True))
    return literals
