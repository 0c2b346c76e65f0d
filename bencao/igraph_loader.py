"""python-igraph without its plotting imports.

``import igraph`` imports ``matplotlib.pyplot`` whenever matplotlib is installed (its drawing shapes
look it up at import time): about one second of every cold ``bencao ask``, for plotting bencao never
does through igraph. :func:`load_igraph` imports igraph with matplotlib hidden, so igraph takes its own
fallback (plotting through matplotlib then says matplotlib is needed); matplotlib itself stays
importable afterwards (``bencao eval`` draws its plots with it). When matplotlib is already imported,
nothing is hidden: the cost is paid already.
"""

from __future__ import annotations

import importlib
import sys
import threading
from types import ModuleType

_LOCK = threading.Lock()


def load_igraph() -> ModuleType:
    mod = sys.modules.get("igraph")
    if mod is not None:
        return mod
    with _LOCK:
        hide = "matplotlib" not in sys.modules
        if hide:
            sys.modules["matplotlib"] = None  # type: ignore[assignment]  # ``import matplotlib`` raises ImportError
        try:
            return importlib.import_module("igraph")
        finally:
            if hide and sys.modules.get("matplotlib", 0) is None:
                del sys.modules["matplotlib"]
