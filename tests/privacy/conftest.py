"""Make the privacy auditor (``audit.py`` next to this file) importable as ``audit``."""

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
