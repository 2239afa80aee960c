-- The embedding cache (migration 0014, docs/adr/0023). Every value is a
-- parameter.

-- name: EmbeddingCacheGet
-- The cached vectors of model $1 among the text hashes $2.
SELECT text_hash, vector FROM embedding_cache WHERE model = $1 AND text_hash = ANY($2::text[]);

-- name: EmbeddingCachePut
-- Stores the vectors of model $1, of dimension $2, for the hashes $3: $4
-- holds them one after the other. A hash cached already keeps its vector
-- (one model gives one text one vector).
INSERT INTO embedding_cache (model, text_hash, dimension, vector)
SELECT $1, h, $2::int, ($4::real[])[(i - 1) * $2::int + 1 : i * $2::int]
FROM unnest($3::text[]) WITH ORDINALITY AS hs(h, i)
ON CONFLICT (model, text_hash) DO NOTHING;
