"""Measured precision of the pattern extractors' relation families, and which are loaded by default.

Figures from the judged samples under ``bench/extraction_precision/`` (recompute them with
``python bench/extraction_precision.py``). A family below 90 % is not written unless the books-txt
option ``all_families: true`` is given.
"""

from __future__ import annotations

PRECISION_BAR = 0.90

#: Families below the bar (see the README's table); their relations are left out by default.
BELOW_BAR: frozenset[str] = frozenset()
