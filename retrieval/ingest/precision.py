"""Measured precision of the pattern extractors' relation families, and which are written by default.

The figures are those of the latest fresh judged sample per family under ``bench/extraction_precision/``
(recompute them with ``python bench/extraction_precision.py --markdown``; a test checks this table
against the judged files). A family below :data:`PRECISION_BAR` is not written unless the book
loaders' ``families`` option names it (``families: all``, or a list of family names).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bencao.errors import BencaoError

PRECISION_BAR = 0.90

#: Every relation family of the extractors, in the order the reports list them.
FAMILIES: tuple[str, ...] = ("flavour_nature", "toxicity", "meridian", "treats", "effect", "alias",
                             "formula_composition", "formula_treats")


@dataclass(frozen=True)
class Measured:
    true: int  # triples judged right
    judged: int  # triples judged
    sample: str  # the folder of bench/extraction_precision/ it was judged in

    @property
    def precision(self) -> float:
        return self.true / self.judged


#: The latest fresh judged sample of each family (seed 7331 for round2, 4242 for round3; 200 triples each).
MEASURED: dict[str, Measured] = {
    "flavour_nature": Measured(199, 200, "round2"),
    "toxicity": Measured(197, 200, "round2"),
    "meridian": Measured(200, 200, "round2"),
    "treats": Measured(180, 200, "round3"),
    "effect": Measured(188, 200, "round2"),
    "alias": Measured(194, 200, "round2"),
    "formula_composition": Measured(194, 200, "round2"),
    "formula_treats": Measured(182, 200, "round3"),
}

#: The families written when a book names none: those measured at or above the bar.
DEFAULT_FAMILIES: frozenset[str] = frozenset(f for f, m in MEASURED.items() if m.precision >= PRECISION_BAR)


def select_families(value: Any) -> frozenset[str]:
    """The families a ``families`` option names: ``default`` (measured at or above the bar), ``all``,
    or a list of family names (an empty list writes no extracted triple)."""
    if value == "default":
        return DEFAULT_FAMILIES
    if value == "all":
        return frozenset(FAMILIES)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise BencaoError(f"option families={value!r}: expected default, all or a list of families ({', '.join(FAMILIES)})")
    unknown = [v for v in value if v not in FAMILIES]
    if unknown:
        raise BencaoError(f"option families: unknown famil{'y' if len(unknown) == 1 else 'ies'} {', '.join(unknown)} "
                          f"(families: {', '.join(FAMILIES)}; or default, all)")
    return frozenset(value)
