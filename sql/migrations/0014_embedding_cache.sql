-- The embedding cache (docs/adr/0023): a vector per (model, text hash),
-- content-addressed. PostgreSQL is the one store that outlives the graph:
-- a rebuild into an empty Neo4j reads every vector embedded before from
-- here instead of running the model again. text_hash is
-- graphmodel.EmbeddingHash(model, text), the hash the graph's nodes carry;
-- the text itself is not stored (the graph holds it, masked). The table
-- holds no tenant id: a text two tenants share has one vector, and only
-- graphsync_relay (sync, rebuild, drift) reads it; no tenant's role can.
CREATE TABLE embedding_cache (
  model       TEXT NOT NULL,
  text_hash   TEXT NOT NULL,
  dimension   INT  NOT NULL CHECK (dimension > 0),
  vector      REAL[] NOT NULL CHECK (cardinality(vector) = dimension),
  created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY (model, text_hash)
);

GRANT SELECT, INSERT, DELETE ON embedding_cache TO graphsync_relay;
