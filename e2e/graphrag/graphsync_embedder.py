"""A neo4j-graphrag Embedder that computes query vectors with the same model
graphsync embeds products with: all-MiniLM-L6-v2, the model.onnx and
tokenizer.json that `make model` unpacks (GRAPHSYNC_EMBED_MODEL_DIR), run by
ONNX Runtime with Hugging Face's tokenizer; mean pooling over the attention
mask, L2 normalisation, at most 256 tokens, as sentence-transformers and
graphsync's embed package do (embed/testdata/embed_reference.py)."""
import os

import numpy as np
import onnxruntime
import tokenizers
from neo4j_graphrag.embeddings.base import Embedder

MAX_TOKENS = 256


def default_model_dir():
    if os.environ.get("GRAPHSYNC_EMBED_MODEL_DIR"):
        return os.environ["GRAPHSYNC_EMBED_MODEL_DIR"]
    cache = os.environ.get("GRAPHSYNC_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "graphsync")
    return os.path.join(cache, "embed", "all-minilm-l6-v2")


class GraphsyncEmbedder(Embedder):
    def __init__(self, model_dir=None):
        super().__init__()
        model_dir = model_dir or default_model_dir()
        self.tokenizer = tokenizers.Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.session = onnxruntime.InferenceSession(
            os.path.join(model_dir, "model.onnx"), providers=["CPUExecutionProvider"])

    def embed_query(self, text: str) -> list[float]:
        enc = self.tokenizer.encode(text)
        ids = np.array([enc.ids], dtype=np.int64)
        mask = np.array([enc.attention_mask], dtype=np.int64)
        hidden = self.session.run(None, {"input_ids": ids, "attention_mask": mask,
                                         "token_type_ids": np.zeros_like(ids)})[0]
        m = mask[..., None].astype(np.float64)
        mean = (hidden.astype(np.float64) * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
        vec = mean / np.clip(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12, None)
        return [float(v) for v in vec[0]]
