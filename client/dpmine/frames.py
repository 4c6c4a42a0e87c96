"""Result sets as files and as pandas DataFrames, with one definition of their columns.

Every result set (miners, rule lists) builds its rows once; ``to_csv`` writes them and
``to_frame`` returns them as a :class:`pandas.DataFrame` with the same columns, in the same
order. pandas is optional for the client: it is imported only by :func:`data_frame`, which says
what to install when it is missing. File parameters take a ``str`` or a :class:`~pathlib.Path`.
"""

from __future__ import annotations

import csv
import importlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["PathLike", "as_path", "data_frame", "write_csv"]

#: What a file parameter accepts.
PathLike = str | os.PathLike[str]


def as_path(path: PathLike) -> Path:
    """``path`` as a :class:`~pathlib.Path` (``"results.csv"`` works as well as a Path)."""
    return Path(path)


def write_csv(path: PathLike, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Write ``columns`` as the header, then ``rows`` (the header even when there are none)."""
    with as_path(path).open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        writer.writerows(rows)


def data_frame(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> pd.DataFrame:
    """``rows`` as a DataFrame with ``columns`` (an empty frame keeps its columns)."""
    try:
        pandas = importlib.import_module("pandas")  # optional: imported only here
    except ImportError as error:
        raise ImportError(
            "to_frame() needs pandas, which the dpmine client does not install; install it "
            "with: pip install pandas"
        ) from error
    frame: pd.DataFrame = pandas.DataFrame([list(row) for row in rows], columns=list(columns))
    return frame
