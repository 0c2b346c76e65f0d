"""igraph is imported without matplotlib (about a second of every cold `bencao ask`), and matplotlib
stays importable for the plots `bencao eval` draws."""

from __future__ import annotations

import json
import subprocess
import sys

CODE = """
import json, sys
from bencao.igraph_loader import load_igraph
ig = load_igraph()
hidden = "matplotlib" in sys.modules
from bencao.retrieval.search.pagerank import weighted_pagerank
scores = weighted_pagerank([("a", "b", 1.0), ("b", "c", 2.0), ("c", "a", 1.0)])
import matplotlib
print(json.dumps({"mpl_after_igraph": hidden, "same_module": load_igraph() is ig, "scores": scores, "mpl": bool(matplotlib.__version__)}))
"""


def test_igraph_loads_without_matplotlib_and_matplotlib_still_imports():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    assert r["mpl_after_igraph"] is False and r["same_module"] and r["mpl"]
    assert abs(sum(r["scores"].values()) - 1.0) < 1e-6 and r["scores"]["a"] > 0
