"""Tantivy BM25 keyword index: the :class:`memcore.ports.KeywordIndex` adapter.

Schema (one document per active entry)::

    id          raw, stored        delete / replace by id, returned by search
    app, user   raw                exact scope filter (always a MUST clause)
    kind        raw                optional kind filter
    topic       raw                optional topic filter (one exact value per topic; any / all)
    event_ts    f64 fast, indexed  optional event-time range (absent when no event time)
    text        "memcore_en"       English words/numbers: lowercase, ASCII fold, stemmed
    topics      "memcore_en"       same analyzer, one value per topic
    text_cjk    "memcore_cjk"      unigrams + bigrams of every CJK run (one value per run)
    topics_cjk  "memcore_cjk"      same for topics

The analyzers are registered on every open (tantivy keeps only their names in the index).
Queries are never given to tantivy's query parser: the text is analysed into English terms
and CJK bigrams (a lone CJK character stays a unigram), which become SHOULD term queries, so
``C++``, ``foo:``, ``"x``, ``AND OR NOT`` or emoji cannot raise. Scope and filters are
constant-score (zero) MUST clauses, so the score is plain BM25 over the text fields.

One writer is kept open (single writer thread). With ``commit_interval_s == 0`` every write
call commits and swaps in a fresh searcher, which concurrent readers pick up atomically.
With ``commit_interval_s > 0`` writes are staged and committed by a background thread within
that interval, or by the next search/count (read-your-writes), so a burst of writes shares
one commit. While writes are staged a ``.staged`` marker file exists in the index directory;
an index opened with the marker present reports ``needs_rebuild`` (the owner rebuilds it from
the vector store, which is the source of truth).
"""

from __future__ import annotations

import logging
import re
import shutil
import threading
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import tantivy

from memcore import telemetry
from memcore.errors import StoreError
from memcore.fields import utc
from memcore.model import Entry, Kind, UserKey
from memcore.search_model import TopicsMatch
from memcore.text import CJK_RANGES

__all__ = ["TantivyIndex"]

log = logging.getLogger(__name__)

EN_ANALYZER = "memcore_en"
CJK_ANALYZER = "memcore_cjk"
TEXT_FIELDS = ("text", "topics")
CJK_FIELDS = ("text_cjk", "topics_cjk")
#: English words / numbers with inner ``.`` or apostrophes, CJK excluded (as memcore.text).
_EN_TOKEN = rf"[^\W_{CJK_RANGES}]+(?:[.'’][^\W_{CJK_RANGES}]+)*"
_CJK_RUN_RE = re.compile(rf"[{CJK_RANGES}]+")
_MAX_TERMS = 64  # per script; bounds the cost of very long queries
_MAX_QUERY_CHARS = 4096
_MAX_TOKEN_BYTES = 64
_TANTIVY_ERRORS = (ValueError, OSError, RuntimeError)
STAGED_MARKER = ".staged"
#: One untokenised term per topic, exactly as stored: the topic filter of a search.
TOPIC_FIELD = "topic"


def _en_analyzer() -> tantivy.TextAnalyzer:
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.regex(_EN_TOKEN))
        .filter(tantivy.Filter.remove_long(_MAX_TOKEN_BYTES))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.ascii_fold())
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


def _cjk_analyzer() -> tantivy.TextAnalyzer:
    return tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.ngram(1, 2)).build()


def _schema() -> tantivy.Schema:
    sb = tantivy.SchemaBuilder()
    sb.add_text_field("id", stored=True, tokenizer_name="raw", index_option="basic")
    for name in ("app", "user", "kind", TOPIC_FIELD):
        sb.add_text_field(name, tokenizer_name="raw", index_option="basic")
    sb.add_float_field("event_ts", indexed=True, fast=True)
    for name in TEXT_FIELDS:
        sb.add_text_field(name, tokenizer_name=EN_ANALYZER, index_option="freq")
    for name in CJK_FIELDS:
        sb.add_text_field(name, tokenizer_name=CJK_ANALYZER, index_option="freq")
    return sb.build()


def _nfkc(text: str) -> str:
    return unicodedata.normalize("NFKC", text)


def _cjk_runs(text: str) -> list[str]:
    return _CJK_RUN_RE.findall(text)


def _cjk_query_grams(text: str) -> list[str]:
    """Bigrams of every CJK run; a one-character run stays a unigram."""
    out: list[str] = []
    for run in _cjk_runs(text):
        if len(run) == 1:
            out.append(run)
        else:
            out.extend(run[i : i + 2] for i in range(len(run) - 1))
    return out


def _unique(items: Iterable[str], limit: int) -> list[str]:
    seen: dict[str, None] = {}
    for item in items:
        if item and item not in seen:
            seen[item] = None
            if len(seen) >= limit:
                break
    return list(seen)


class TantivyIndex:
    """BM25 keyword index over text and topics; ``path=None`` keeps it in RAM."""

    db_system = "tantivy"
    """``db.system.name`` in search spans."""

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        heap_size: int = 50_000_000,
        num_threads: int = 1,
        commit_interval_s: float = 0.0,
        shard: int | None = None,
    ) -> None:
        self._schema = _schema()
        self._shard_label = "-" if shard is None else str(shard)
        self._interval = max(0.0, commit_interval_s)
        self._pending = False
        self._marker = self._path_marker(path)
        self.needs_rebuild = self._marker is not None and self._marker.exists()
        self._en = _en_analyzer()
        self._path = Path(path) if path is not None else None
        self._index = self._open()
        for name, analyzer in ((EN_ANALYZER, self._en), (CJK_ANALYZER, _cjk_analyzer())):
            self._index.register_tokenizer(name, analyzer)
        self._index.config_reader(reload_policy="manual")
        self._lock = threading.Lock()
        try:
            self._writer: tantivy.IndexWriter | None = self._index.writer(heap_size, num_threads)
        except ValueError as exc:  # LockBusy: another writer holds this directory
            raise StoreError(f"cannot open a writer on keyword index {self._path}: {exc}", field="path") from exc
        self._searcher: tantivy.Searcher | None = self._index.searcher()
        self._closed = threading.Event()
        if self._interval > 0:
            threading.Thread(target=self._commit_loop, name="tantivy-commit", daemon=True).start()

    @staticmethod
    def _path_marker(path: str | Path | None) -> Path | None:
        return Path(path) / STAGED_MARKER if path is not None else None

    def _commit_loop(self) -> None:
        while not self._closed.wait(self._interval):
            try:
                self.commit()
            except StoreError:
                log.exception("background keyword commit failed")

    def commit(self) -> None:
        """Make staged writes searchable (deferred mode); a no-op when nothing is staged."""
        with self._lock:
            if not self._pending or self._writer is None:
                return
            try:
                with telemetry.timed("memcluster_keyword_commit_ms", shard=self._shard_label):
                    self._writer.commit()
                    self._index.reload()
                self._searcher = self._index.searcher()
            except _TANTIVY_ERRORS as exc:
                raise StoreError(f"keyword index commit failed: {exc}") from exc
            self._pending = False
            if self._marker is not None:
                self._marker.unlink(missing_ok=True)

    def _open(self) -> tantivy.Index:
        if self._path is None:
            return tantivy.Index(self._schema)
        self._path.mkdir(parents=True, exist_ok=True)
        try:
            return tantivy.Index(self._schema, str(self._path), reuse=True)
        except ValueError as exc:
            # The index is derived: an old or foreign schema is dropped and rebuilt by the owner.
            if not (self._path / "meta.json").exists():
                raise StoreError(f"cannot open keyword index: {exc}", field="path") from exc
            log.warning("keyword index at %s has another schema (%s); recreating it empty", self._path, exc)
            shutil.rmtree(self._path)
            self._path.mkdir(parents=True)
            return tantivy.Index(self._schema, str(self._path), reuse=True)

    # ----------------------------------------------------------------- writes

    def _document(self, entry: Entry) -> tantivy.Document:
        doc = tantivy.Document()
        doc.add_text("id", entry.id)
        doc.add_text("app", entry.app)
        doc.add_text("user", entry.user)
        doc.add_text("kind", str(entry.kind))
        if entry.event_time is not None:
            doc.add_float("event_ts", entry.event_time.timestamp())
        text = _nfkc(entry.text)
        doc.add_text("text", text)
        for run in _cjk_runs(text):
            doc.add_text("text_cjk", run)
        for topic in entry.topics:
            doc.add_text(TOPIC_FIELD, topic)
            topic = _nfkc(topic)
            doc.add_text("topics", topic)
            for run in _cjk_runs(topic):
                doc.add_text("topics_cjk", run)
        return doc

    @contextmanager
    def _writing(self, what: str) -> Iterator[tantivy.IndexWriter]:
        """Hold the writer; commit and swap the searcher on success, roll back on any failure."""
        with self._lock:
            if self._writer is None:
                raise StoreError("keyword index is closed")
            writer = self._writer
            if self._interval > 0 and not self._pending and self._marker is not None:
                self._marker.touch()  # staged but uncommitted: a crash now means "rebuild me"
            try:
                yield writer
                if self._interval > 0 and what != "rebuild":
                    self._pending = True
                else:
                    with telemetry.timed("memcluster_keyword_commit_ms", shard=self._shard_label):
                        writer.commit()
                        self._index.reload()
                    self._searcher = self._index.searcher()
                    self._pending = False
                    if self._marker is not None:
                        self._marker.unlink(missing_ok=True)
            except BaseException as exc:
                try:
                    writer.rollback()
                except _TANTIVY_ERRORS:
                    log.exception("keyword index rollback failed")
                if isinstance(exc, _TANTIVY_ERRORS):
                    raise StoreError(f"keyword index {what} failed: {exc}") from exc
                raise

    def upsert(self, entries: Sequence[Entry]) -> None:
        """Index entries, replacing by id; tombstoned entries are removed instead."""
        if not entries:
            return
        with self._writing("upsert") as writer:
            for entry in entries:
                writer.delete_documents_by_term("id", entry.id)
                if entry.active:
                    writer.add_document(self._document(entry))

    def delete(self, ids: Sequence[str]) -> None:
        """Remove documents by entry id (unknown ids are ignored)."""
        if not ids:
            return
        with self._writing("delete") as writer:
            for entry_id in ids:
                writer.delete_documents_by_term("id", entry_id)

    def delete_user(self, key: UserKey) -> None:
        """Remove every document of ``key``."""
        with self._writing("delete_user") as writer:
            writer.delete_documents_by_query(self._scope(key))

    def rebuild(self, entries: Iterator[Entry]) -> int:
        """Drop everything and index the active ``entries`` in one commit; returns how many.

        A failure (of tantivy or of the ``entries`` iterator) rolls back: the old index stays.
        """
        count = 0
        with self._writing("rebuild") as writer:
            writer.delete_all_documents()
            for entry in entries:
                if entry.active:
                    writer.add_document(self._document(entry))
                    count += 1
        return count

    # ------------------------------------------------------------------ reads

    def _term(self, field: str, value: str) -> tantivy.Query:
        return tantivy.Query.term_query(self._schema, field, value)

    def _scope(self, key: UserKey) -> tantivy.Query:
        return tantivy.Query.boolean_query(
            [(tantivy.Occur.Must, self._term("app", key.app)), (tantivy.Occur.Must, self._term("user", key.user))]
        )

    def _text_query(self, query: str) -> tantivy.Query | None:
        text = _nfkc(query[:_MAX_QUERY_CHARS])
        clauses: list[tuple[tantivy.Occur, tantivy.Query]] = []
        for fields, terms in (
            (TEXT_FIELDS, _unique(self._en.analyze(text), _MAX_TERMS)),
            (CJK_FIELDS, _unique(_cjk_query_grams(text), _MAX_TERMS)),
        ):
            clauses.extend((tantivy.Occur.Should, self._term(f, t)) for t in terms for f in fields)
        return tantivy.Query.boolean_query(clauses) if clauses else None

    def search(
        self,
        key: UserKey,
        query: str,
        *,
        limit: int,
        kind: Kind | None = None,
        time_from: datetime | None = None,
        time_to: datetime | None = None,
        topics: Sequence[str] = (),
        topics_match: TopicsMatch = "any",
    ) -> list[tuple[str, float]]:
        """(entry id, BM25 score) of ``key``'s documents (with any or all of ``topics`` when given),
        best first. Odd query text never raises.

        In deferred mode staged writes are committed first (read-your-writes)."""
        if self._pending:
            self.commit()
        searcher = self._searcher
        if searcher is None:
            raise StoreError("keyword index is closed")
        if limit <= 0:
            return []
        text_query = self._text_query(query)
        if text_query is None:
            return []
        filters: list[tuple[tantivy.Occur, tantivy.Query]] = [
            (tantivy.Occur.Must, self._term("app", key.app)),
            (tantivy.Occur.Must, self._term("user", key.user)),
        ]
        if kind is not None:
            filters.append((tantivy.Occur.Must, self._term("kind", str(kind))))
        if topics and topics_match == "all":
            filters += [(tantivy.Occur.Must, self._term(TOPIC_FIELD, t)) for t in topics]
        elif topics:
            any_topic = [(tantivy.Occur.Should, self._term(TOPIC_FIELD, t)) for t in topics]
            filters.append((tantivy.Occur.Must, tantivy.Query.boolean_query(any_topic)))
        if time_from is not None or time_to is not None:
            lower = utc(time_from).timestamp() if time_from is not None else None
            upper = utc(time_to).timestamp() if time_to is not None else None
            filters.append(
                (
                    tantivy.Occur.Must,
                    tantivy.Query.range_query(self._schema, "event_ts", tantivy.FieldType.Float, lower, upper),
                )
            )
        scoped = tantivy.Query.const_score_query(tantivy.Query.boolean_query(filters), 0.0)
        full = tantivy.Query.boolean_query([(tantivy.Occur.Must, scoped), (tantivy.Occur.Must, text_query)])
        try:
            result = searcher.search(full, limit, count=False)
            return [(str(searcher.doc(addr).get_first("id")), float(score)) for score, addr in result.hits]
        except _TANTIVY_ERRORS as exc:
            raise StoreError(f"keyword search failed: {exc}") from exc

    def count(self) -> int:
        """Number of indexed documents."""
        if self._pending:
            self.commit()
        searcher = self._searcher
        if searcher is None:
            raise StoreError("keyword index is closed")
        return int(searcher.num_docs)

    def close(self) -> None:
        """Commit staged writes, wait for merges and release the writer (and its lock). Idempotent."""
        self._closed.set()
        try:
            self.commit()
        except StoreError:
            log.exception("keyword index: final commit failed; the index will be rebuilt")
        with self._lock:
            writer, self._writer = self._writer, None
            self._searcher = None
            if writer is not None:
                try:
                    writer.wait_merging_threads()
                except _TANTIVY_ERRORS as exc:
                    log.warning("keyword index close: %s", exc)
                del writer
