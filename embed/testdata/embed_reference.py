#!/usr/bin/env python3
"""Reference vectors for embed's fixture (embed/reference_test.go).

Run once per model, after `make model`, in a venv with the PyPI packages
tokenizers, onnxruntime and numpy (no torch needed):

  python3 -m venv /tmp/ref && /tmp/ref/bin/pip install tokenizers onnxruntime numpy
  /tmp/ref/bin/python embed/testdata/embed_reference.py \
      ~/.cache/graphsync/embed/all-minilm-l6-v2 embed/testdata/reference-all-minilm-l6-v2.json

It is sentence-transformers' all-MiniLM-L6-v2 pipeline (Transformer with
max_seq_length 256, Pooling mean, Normalize) written out with the libraries
that pipeline stands on: Hugging Face's own tokenizer (Rust, reading the same
tokenizer.json) and ONNX Runtime on the same model.onnx. sentence-transformers
itself would bring PyTorch and run the PyTorch weights, not this file, so it
would test the export as well as our code. Each text runs alone (no padding),
so the reference has no batching effects.
"""
import json
import sys

import numpy as np
import onnxruntime
import tokenizers

MAX_TOKENS = 256


def main(model_dir, out_path):
    texts = json.load(open(__file__.rsplit("/", 1)[0] + "/embed-texts.json", encoding="utf-8"))["texts"]
    tok = tokenizers.Tokenizer.from_file(model_dir + "/tokenizer.json")
    tok.no_padding()
    tok.enable_truncation(MAX_TOKENS)
    opts = onnxruntime.SessionOptions()
    session = onnxruntime.InferenceSession(model_dir + "/model.onnx", opts, providers=["CPUExecutionProvider"])
    rows = []
    for text in texts:
        enc = tok.encode(text)
        ids = np.array([enc.ids], dtype=np.int64)
        mask = np.array([enc.attention_mask], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = session.run(None, feeds)[0]  # [1, tokens, dim]
        m = mask[..., None].astype(np.float64)
        mean = (hidden.astype(np.float64) * m).sum(axis=1) / np.clip(m.sum(axis=1), 1e-9, None)
        vec = mean / np.clip(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12, None)
        rows.append({"ids": enc.ids, "vector": [float("%.8g" % v) for v in vec[0]]})
    json.dump({
        "reference": "tokenizers %s + onnxruntime %s, mean pooling, L2, max %d tokens" % (
            tokenizers.__version__, onnxruntime.__version__, MAX_TOKENS),
        "rows": rows,
    }, open(out_path, "w"), separators=(",", ":"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
