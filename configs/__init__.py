"""The shipped recipes (package data ``bencao.configs``): see :mod:`bencao.recipes` and ``bencao recipes list``."""
