"""Which relation families the pattern extractors write: the measured table and the ``families`` option."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from bencao.errors import BencaoError
from bencao.retrieval.ingest.precision import DEFAULT_FAMILIES, FAMILIES, MEASURED, PRECISION_BAR, select_families

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _precision_script():
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return importlib.import_module("extraction_precision")


def test_the_measured_table_is_the_judged_samples():
    """precision.MEASURED (which picks the default families) says what the committed judgments say."""
    script = _precision_script()
    rows = script.table([BENCH / "extraction_precision" / "round2", BENCH / "extraction_precision" / "round3"])
    assert {r["family"]: (r["true"], r["judged"], r["sample"]) for r in rows} == \
        {f: (m.true, m.judged, m.sample) for f, m in MEASURED.items()}
    assert [r["family"] for r in rows] == list(FAMILIES) and all(r["judged"] >= 200 for r in rows)
    assert {r["family"] for r in rows if r["loaded_by_default"]} == DEFAULT_FAMILIES


def test_default_families_are_those_at_or_above_the_bar():
    assert DEFAULT_FAMILIES == {f for f in FAMILIES if MEASURED[f].true >= PRECISION_BAR * MEASURED[f].judged}
    assert select_families("default") == DEFAULT_FAMILIES and select_families("all") == set(FAMILIES)


def test_a_list_or_one_name_selects_exactly_those():
    assert select_families(["treats", "alias"]) == {"treats", "alias"}
    assert select_families("formula_treats") == {"formula_treats"}
    assert select_families([]) == frozenset()


@pytest.mark.parametrize("value, words", [(["treats", "dosage"], "unknown family dosage"),
                                          (["x", "y"], "unknown families x, y"),
                                          (True, "expected default, all or a list"),
                                          ([1], "expected default, all or a list")])
def test_a_bad_families_option_names_the_problem(value, words):
    with pytest.raises(BencaoError, match=words):
        select_families(value)
