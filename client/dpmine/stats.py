"""Statistics of redescriptions from (noisy) counts: pure post-processing (ALGORITHMS.md §1.2–1.3).

Nothing here sees data; the functions take released counts. They live in
:mod:`dpmine.wire.statistics`, shared with the server (which derives a response's statistics
fields with them), and are re-exported here for analysts.
"""

from __future__ import annotations

from dpmine.wire.statistics import CellStatistics, jaccard, p_value, statistics_from_cells

__all__ = ["CellStatistics", "jaccard", "p_value", "statistics_from_cells"]
