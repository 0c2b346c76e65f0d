"""Build a graph directory from a YAML recipe (``configs/graph/*.yaml``).

A build writes into a temporary directory beside the target and swaps it in only when every source
has been ingested, with one atomic rename of a symlink (``DIR -> .DIR.v-<stamp>``), so a failed or
killed build leaves the previous graph intact and its leftovers are removed by the next run.

Paths in a recipe: a source path (or the ``mapping`` option, ``index_config`` or ``root``) that starts
with ``repo:`` names a file bencao ships (the bundled sample data ``repo:data/sample/...``, shipped
configs ``repo:configs/...``), in a checkout and an installed wheel alike, so a copied recipe keeps
working; any other relative path resolves against ``root``. In the YAML, ``root`` is relative to the
recipe's folder; given on the command line (``root=PATH``) it is relative to the current directory,
so ``root=../corpus`` means what the shell means by it.

A build records a key of everything its store derives from (:func:`build_key`: the recipe's settings,
the bytes of every source file, bencao's ingestion code) with the store's id and write generation,
so ``bencao graph build --skip-current`` can leave a graph alone that this recipe already built
from the same inputs and that nothing wrote to since (``make eval-corpus`` builds the corpus graph once).
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from bencao.config import field, load_config, to_dict
from bencao.errors import BencaoError, ConfigError, DiskFull, is_disk_full
from bencao import faults
from bencao.faults import fault
from bencao.io import content_hash
from bencao.retrieval.graph.store import Graph
from bencao.retrieval.graph.versions import building_dir, install, managed_path, recover, writer_lock


@dataclass
class SourceConfig:
    format: str = field(help="Loader format name (see `bencao graph formats`).")
    path: str = field(help="File path or glob, relative to the recipe's `root`; `repo:PATH` names a file bencao ships (e.g. repo:data/sample/...).")
    options: dict[str, Any] = field(default_factory=dict, help="Loader options (e.g. max_tokens, materia_medica, mapping).")
    title: str | None = field(None, help="Document title; defaults to the file name (books use their own title).")
    licence: str | None = field(None, help="Licence recorded on the document.")


@dataclass
class GraphBuildConfig:
    sources: list[SourceConfig] = field(help="Inputs, ingested in this order (curated sources first so books resolve to their entities).")
    name: str = field("graph", help="Name recorded in the manifest.")
    root: str = field(".", help="Directory that relative source paths resolve against: relative to this YAML file, or to the current directory when given on the command line (root=PATH); `repo:PATH` names a folder bencao ships.")
    repo: str | None = field(None, help="Where `repo:` paths resolve: empty = the files this bencao ships (its configs/ and data/, in a checkout or an installed wheel); a folder relative to this YAML file otherwise.")
    index: bool = field(True, help="Build the retrieval indexes after ingestion.")
    index_config: str | None = field(None, help="Index/retrieval recipe: a shipped name (retrieval/default), `repo:PATH`, or a path relative to `root`; the built-in defaults when empty.")
    serving: str | None = field(None, help="Serving recipe the graph is meant to be served with (a shipped name such as serving/classics, `repo:PATH`, "
                                           "or a path relative to `root`): recorded in the manifest, and what `ask`, `serve`, `infer` and "
                                           "`eval` use on this graph when no --config is given.")
    options: dict[str, dict[str, Any]] = field(default_factory=dict, help="Loader options by format, applied to every source of that format "
                                                                          "over its own (e.g. options.books-txt.families=all on the command line).")


@dataclass
class ResolvedSource:
    format: str
    path: Path
    options: dict[str, Any]
    title: str | None
    licence: str | None


REPO_PREFIX = "repo:"


def load_build_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> tuple[GraphBuildConfig, Path]:
    """Parse a build recipe; returns the config and the resolved root directory.

    ``cfg.repo`` comes back absolute, so later steps resolve ``repo:`` paths without the recipe's location.
    """
    from bencao.config import resolve_config_path
    from bencao.recipes import package_root

    path = resolve_config_path(path)
    cfg = load_config(GraphBuildConfig, path, overrides)
    here = path.resolve().parent
    cfg.repo = str((here / cfg.repo).resolve() if cfg.repo else package_root())
    root_on_cli = any(str(o).split("=", 1)[0].strip() == "root" for o in overrides)
    if cfg.root.startswith(REPO_PREFIX):
        root = (Path(cfg.repo) / cfg.root[len(REPO_PREFIX):]).resolve()
    else:
        root = ((Path.cwd() if root_on_cli else here) / cfg.root).resolve()
    if root_on_cli and not root.is_dir():
        raise ConfigError(f"root={cfg.root}: no such folder ({root})")
    return cfg, root


def resolve_path(value: str, root: Path, repo: str | Path) -> Path:
    """A recipe path: ``repo:X`` → the checkout's X; absolute stays; anything else is under ``root``."""
    if value.startswith(REPO_PREFIX):
        return Path(repo) / value[len(REPO_PREFIX):]
    return Path(value) if os.path.isabs(value) else root / value


def resolve_sources(cfg: GraphBuildConfig, root: Path) -> list[ResolvedSource]:
    out: list[ResolvedSource] = []
    for i, src in enumerate(cfg.sources):
        pattern = str(resolve_path(src.path, root, cfg.repo))
        matches = sorted(glob.glob(pattern)) if any(c in src.path for c in "*?[") else [pattern]
        if not matches:
            raise ConfigError(f"sources[{i}]: no file matches {src.path!r} (under {Path(pattern).parent})")
        options = {**src.options, **cfg.options.get(src.format, {})}
        if "mapping" in options:
            options["mapping"] = str(resolve_path(str(options["mapping"]), root, cfg.repo))
        for m in matches:
            if not Path(m).exists():
                raise ConfigError(f"sources[{i}]: file not found: {m}")
            out.append(ResolvedSource(src.format, Path(m), options, src.title, src.licence))
    return out


ProgressFn = Callable[[str, int, int], None]

#: The code a build's store derives from (ingestion, the store and its schema, text normalisation,
#: file reading): modules and packages, their ``.py`` and ``.sql`` files hashed into the build key.
BUILD_CODE = ("bencao.retrieval.build", "bencao.retrieval.ingest", "bencao.retrieval.graph", "bencao.text", "bencao.io")
#: Recipe settings that do not change the store (a current graph still gets its indexes brought up to date).
_KEY_EXEMPT = ("index", "index_config", "serving")


def _file_digest(path: Path) -> str:
    import hashlib

    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha1").hexdigest()


def code_digest(modules: tuple[str, ...] = BUILD_CODE) -> str:
    """SHA-1 over the source files of ``modules`` (a package: every ``.py``/``.sql`` file below it)."""
    import importlib

    parts: list[str] = []
    for name in modules:
        mod = importlib.import_module(name)
        base = Path(mod.__file__ or "")
        files = [base] if base.name != "__init__.py" else sorted(p for p in base.parent.rglob("*") if p.suffix in (".py", ".sql"))
        parts += [f"{name}:{p.relative_to(base.parent).as_posix()}:{_file_digest(p)}" for p in files]
    return content_hash(*parts, length=40)


def build_key(cfg: GraphBuildConfig, root: Path, sources: list[ResolvedSource]) -> str:
    """A hash of everything a build's store derives from: the recipe's settings (``root`` resolved;
    ``index``/``index_config`` aside), each source (format, path, options, title, licence and the
    file's bytes) and bencao's ingestion code (:data:`BUILD_CODE`). 699 gzip books: ~0.5 s."""
    settings = {k: v for k, v in to_dict(cfg).items() if k not in _KEY_EXEMPT}
    settings["root"] = str(root)
    src = [[s.format, str(s.path), s.options, s.title, s.licence, _file_digest(s.path)] for s in sources]
    return content_hash(json.dumps([settings, src, code_digest()], sort_keys=True, ensure_ascii=False, default=str), length=40)


def current_build(graph_dir: Path, key: str) -> bool:
    """Does ``graph_dir`` hold a graph built with ``key`` that nothing wrote to since?"""
    if not (graph_dir / "graph.sqlite").exists():
        return False
    try:
        rec = json.loads((graph_dir / "manifest.json").read_text(encoding="utf-8")).get("build") or {}
    except (OSError, ValueError):
        return False
    if rec.get("key") != key:
        return False
    with Graph.open(graph_dir, read_only=True) as g:
        return rec.get("store") == g.store_id() and rec.get("generation") == g.generation()


def build_graph(cfg: GraphBuildConfig, root: Path, graph_dir: str | Path, progress: ProgressFn | None = None,
                skip_current: bool = False) -> dict[str, Any]:
    """Ingest every source into a fresh graph at ``graph_dir`` (atomically replacing an old one).

    With ``skip_current`` a graph at ``graph_dir`` that this recipe built from the same inputs
    (:func:`build_key`) and that nothing wrote to since is kept (``"skipped": True`` in the result);
    with ``cfg.index`` its indexes are brought up to date (a cheap check when they are)."""
    from bencao.retrieval.ingest.registry import get_loader

    graph_dir = managed_path(graph_dir)
    sources = resolve_sources(cfg, root)
    for s in sources:
        get_loader(s.format)  # unknown formats fail before any work
    if graph_dir.is_dir() and not graph_dir.is_symlink() and any(graph_dir.iterdir()) and not (graph_dir / "graph.sqlite").exists():
        raise BencaoError(f"{graph_dir}: exists and is not a bencao graph; refusing to replace it")
    graph_dir.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    key = build_key(cfg, root, sources)
    serving = serving_recipe(cfg, root)
    with writer_lock(graph_dir):
        recover(graph_dir)  # leftovers of killed builds
        if skip_current and current_build(graph_dir, key):
            with Graph.open(graph_dir) as g:
                if cfg.index:
                    _build_indexes(g, cfg, root)
                if g.read_manifest().get("serving") != serving:
                    g.write_manifest("serving", {"recipe": serving}, serving=serving)
                stats = g.stats()
            return {"graph": str(graph_dir), "seconds": round(time.perf_counter() - t0, 2), "documents": [], "stats": stats,
                    "skipped": True}
        return _build_locked(cfg, root, graph_dir, sources, progress, key, serving)


def _build_locked(cfg: GraphBuildConfig, root: Path, graph_dir: Path, sources: list[ResolvedSource],
                  progress: ProgressFn | None, key: str, serving: str | None = None) -> dict[str, Any]:
    from bencao.retrieval.ingest.registry import ingest_file

    tmp = building_dir(graph_dir)
    shutil.rmtree(tmp, ignore_errors=True)
    from bencao.retrieval.graph.store import folder_writable

    if tmp.parent.exists() and not folder_writable(tmp.parent):  # a read-only mount: one line, not an OSError from mkdir
        raise BencaoError(f"{graph_dir}: cannot build here: {tmp.parent} is read-only; build where it is writable and copy or mount the result")
    t0 = time.perf_counter()
    docs: list[dict[str, Any]] = []
    try:
        g = Graph.create(tmp)
        try:
            for i, s in enumerate(sources):
                if progress:
                    progress(s.path.name, i, len(sources))
                t = time.perf_counter()
                doc_id, added, counts = ingest_file(g, s.format, s.path, s.options, title=s.title, licence=s.licence)
                docs.append({"document": doc_id, "source": s.path.name, "format": s.format, "added": added, **counts,
                             "seconds": round(time.perf_counter() - t, 2)})
            if progress:
                progress("done", len(sources), len(sources))
            books = _book_report(g, tmp)
            g.write_manifest("build", {"recipe": cfg.name, "sources": len(sources), "seconds": round(time.perf_counter() - t0, 2)}, name=cfg.name,
                             build={"key": key, "store": g.store_id(), "generation": g.generation()}, serving=serving,
                             **({"books": books} if books else {}))
            fault("build.ingested")
            if cfg.index:
                _build_indexes(g, cfg, root, progress)
            faults.call("sqlite.write")  # the checkpoint writes the store's pages: a full disk shows here
            g.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            fault("build.indexed")
            built = {r[0] for r in g.conn.execute("SELECT id FROM documents")}
        finally:
            g.close()
        dropped = _dropped_documents(graph_dir, built)  # under the writer lock: no add can come in between
        _swap_in(tmp, graph_dir)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, DiskFull) or is_disk_full(exc):  # SQLITE_FULL at the checkpoint, ENOSPC in an index: one line, not a traceback
            raise DiskFull(f"no space left on device while building {graph_dir}; the previous version is unchanged "
                           "(temporary files removed; free some space and run the command again)") from None
        raise
    with Graph.open(graph_dir) as g:
        stats = g.stats()
    out = {"graph": str(graph_dir), "seconds": round(time.perf_counter() - t0, 2), "documents": docs, "stats": stats}
    if dropped:
        out["dropped_documents"] = dropped
    return out


def _dropped_documents(graph_dir: Path, built: set[str]) -> list[dict[str, Any]]:
    """Documents of the graph being replaced that the rebuilt one lacks: added with ``graph add``
    (perhaps by an add that waited while this build started), not by the recipe. The CLI says so."""
    if not (graph_dir / "graph.sqlite").exists():
        return []
    db = (graph_dir / "graph.sqlite").resolve()
    sides = [db.with_name(db.name + suffix) for suffix in ("-wal", "-shm")]
    existed = {p for p in sides if p.exists()}
    try:  # plain SQLite, read-only: Graph.open would also tidy the directory this build is about to use
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            rows = conn.execute("SELECT id, source FROM documents ORDER BY rowid").fetchall()
        finally:
            conn.close()
        return [{"document": r[0], "source": r[1]} for r in rows if r[0] not in built]
    except (OSError, sqlite3.Error):
        return []
    finally:  # leave the old graph's files as they were (no other writer: this build holds the lock)
        for p in sides:
            if p not in existed:
                with contextlib.suppress(OSError):
                    p.unlink()


def _book_report(g: Graph, graph_dir: Path) -> dict[str, Any] | None:
    """Per-book ingestion report (``reports/books.jsonl``) of the books-txt documents; its summary for the manifest."""
    from bencao.retrieval.ingest.book_report import write_book_report

    return write_book_report(g.documents(), graph_dir)


def serving_recipe(cfg: GraphBuildConfig, root: Path) -> str | None:
    """What the manifest records of ``cfg.serving``: a shipped recipe's name as it is (it resolves in any
    installation), anything else as an absolute path; None when the recipe names none. A name that
    is neither a shipped recipe nor a file is refused before the build starts."""
    if not cfg.serving:
        return None
    from bencao.recipes import find

    if not cfg.serving.startswith("repo:") and find(cfg.serving) is not None and not (root / cfg.serving).exists():
        return cfg.serving
    p = resolve_path(cfg.serving, root, cfg.repo)
    if not p.is_file():
        raise BencaoError(f"serving: {cfg.serving!r} is neither a shipped recipe (`bencao recipes list`) nor a file ({p})")
    return str(p.resolve())


def _build_indexes(g: Graph, cfg: GraphBuildConfig, root: Path, progress: ProgressFn | None = None) -> None:
    """Build retrieval indexes when the retrieval index module is present."""
    try:
        from bencao.retrieval.index import update_indexes
    except ImportError:
        return
    index_cfg = None
    if cfg.index_config:
        p = resolve_path(cfg.index_config, root, cfg.repo)
        if not p.exists():  # a shipped recipe's name (retrieval/default)
            from bencao.recipes import find

            p = find(cfg.index_config) or p
        index_cfg = str(p)
    update_indexes(g, index_cfg, progress=(lambda kind, i, n: progress(f"index {kind}", i, n)) if progress else None)


def _swap_in(tmp: Path, target: Path) -> None:
    """Make the finished build the graph at ``target`` in one atomic rename (see ``retrieval/graph/versions.py``)."""
    install(tmp, target)
