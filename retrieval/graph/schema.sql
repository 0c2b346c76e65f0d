-- bencao graph store, schema version 1. The tables are the contract between the parts.
-- Every row that holds knowledge is tied to a document (its provenance), so removing a document
-- removes exactly what nothing else supports.

CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS documents (
    id        TEXT PRIMARY KEY,            -- content hash of (format, bytes, options)
    source    TEXT NOT NULL,               -- file name or logical source
    title     TEXT,
    kind      TEXT NOT NULL,               -- book | ontology | catalog | kb | case | qa | reasoning | derived
    format    TEXT,                        -- loader format name
    licence   TEXT,
    status    TEXT NOT NULL DEFAULT 'ready',
    meta      TEXT NOT NULL DEFAULT '{}',  -- JSON
    added_at  TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS sections (     -- the macro tree: book > volume/chapter > section
    id          TEXT PRIMARY KEY,
    document_id TEXT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    parent_id   TEXT REFERENCES sections(id) ON DELETE CASCADE,
    level       INTEGER NOT NULL,          -- 0 = the book itself
    title       TEXT NOT NULL,
    path        TEXT NOT NULL,             -- JSON list of titles from the book down
    ord         INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS sections_document ON sections(document_id, ord);
CREATE INDEX IF NOT EXISTS sections_parent ON sections(parent_id);

CREATE TABLE IF NOT EXISTS snippets (
    id          TEXT PRIMARY KEY,
    document_id TEXT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    section_id  TEXT NOT NULL REFERENCES sections(id) ON DELETE CASCADE,
    ord         INTEGER NOT NULL,
    text        TEXT NOT NULL,
    n_tokens    INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS snippets_section ON snippets(section_id, ord);
CREATE INDEX IF NOT EXISTS snippets_document ON snippets(document_id);

CREATE TABLE IF NOT EXISTS entities (
    id          TEXT PRIMARY KEY,          -- ontology/KB id when the source has one, else a content hash
    name        TEXT NOT NULL,             -- display form, as written in the source
    norm        TEXT NOT NULL,             -- matching key (bencao.text.norm_key)
    type        TEXT NOT NULL,
    layer       TEXT NOT NULL,             -- terminology | book | case | ...
    attributes  TEXT NOT NULL DEFAULT '{}',-- JSON, merged over entity_sources
    description TEXT
);
CREATE INDEX IF NOT EXISTS entities_norm ON entities(norm);
CREATE INDEX IF NOT EXISTS entities_type ON entities(type);

CREATE TABLE IF NOT EXISTS entity_sources (  -- which documents assert an entity, with what they say of it
    entity_id   TEXT NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
    document_id TEXT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    attributes  TEXT NOT NULL DEFAULT '{}',
    description TEXT,
    PRIMARY KEY (entity_id, document_id)
);
CREATE INDEX IF NOT EXISTS entity_sources_document ON entity_sources(document_id);

CREATE TABLE IF NOT EXISTS aliases (
    norm        TEXT NOT NULL,             -- matching key
    entity_id   TEXT NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
    alias       TEXT NOT NULL,             -- display form
    kind        TEXT NOT NULL,             -- name | synonym | variant | xref | label_name | traditional ...
    document_id TEXT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    PRIMARY KEY (norm, entity_id, kind, document_id)
);
CREATE INDEX IF NOT EXISTS aliases_entity ON aliases(entity_id);
CREATE INDEX IF NOT EXISTS aliases_document ON aliases(document_id);

CREATE TABLE IF NOT EXISTS relations (
    name        TEXT PRIMARY KEY,
    description TEXT,
    head_type   TEXT,
    tail_type   TEXT
);

CREATE TABLE IF NOT EXISTS triples (
    id          TEXT PRIMARY KEY,          -- content hash of (head, relation, tail)
    head_id     TEXT NOT NULL REFERENCES entities(id),
    relation    TEXT NOT NULL REFERENCES relations(name),
    tail_id     TEXT NOT NULL REFERENCES entities(id),
    confidence  REAL NOT NULL CHECK (confidence >= 0 AND confidence <= 1),
    layer       TEXT NOT NULL,             -- book | personal | imported | completed
    origin      TEXT NOT NULL,             -- loader / extractor that produced it first
    attributes  TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS triples_head ON triples(head_id, relation);
CREATE INDEX IF NOT EXISTS triples_tail ON triples(tail_id, relation);
CREATE INDEX IF NOT EXISTS triples_relation ON triples(relation);

CREATE TABLE IF NOT EXISTS triple_sources (  -- M1 (book snippet) / M2 (reasoning text) / record (curated row)
    triple_id   TEXT NOT NULL REFERENCES triples(id) ON DELETE CASCADE,
    document_id TEXT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    snippet_id  TEXT REFERENCES snippets(id) ON DELETE CASCADE,
    kind        TEXT NOT NULL,
    confidence  REAL NOT NULL,
    layer       TEXT NOT NULL,
    origin      TEXT NOT NULL,
    attributes  TEXT NOT NULL DEFAULT '{}'
);
CREATE UNIQUE INDEX IF NOT EXISTS triple_sources_key ON triple_sources(triple_id, document_id, COALESCE(snippet_id, ''));
CREATE INDEX IF NOT EXISTS triple_sources_snippet ON triple_sources(snippet_id);
CREATE INDEX IF NOT EXISTS triple_sources_document ON triple_sources(document_id);

CREATE TABLE IF NOT EXISTS links (         -- entity <-> entity across layers (same_as, explains)
    src_id      TEXT NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
    dst_id      TEXT NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
    kind        TEXT NOT NULL,
    score       REAL NOT NULL,
    document_id TEXT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    PRIMARY KEY (src_id, dst_id, kind)
);
CREATE INDEX IF NOT EXISTS links_dst ON links(dst_id);
