"""Where memcluster's LangGraph store differs from LangGraph's own stores, as the vendored suites find it: one
reason per difference, and the tests that show it (marked ``xfail(strict=True)`` by ``conftest.py``, so a
test that starts passing fails the suite until it leaves this table). README.md (LangGraph) lists the same."""

from __future__ import annotations

CROSS_USER = ("no cross-user reads: a search or namespace listing must name the memcluster user (a search prefix "
              "or a list_namespaces prefix reaching the user label); memcluster keeps, shards and erases each user "
              "apart and has no listing of an app's users")
ONE_VECTOR = ("one vector per item: memcluster embeds the indexed fields' text joined into the item's memory text; "
              "LangGraph embeds each field path apart and scores an item by its best field")
FILTER_KEYS = ("any filter key is a key: memcluster applies filters to the values in the client, so a key that "
               "SQLite's JSON paths cannot hold matches nothing instead of raising 'Invalid filter key'")

#: test (file::function, parameters included) -> the difference it shows
XFAIL: dict[str, str] = {
    "test_inmemory_store.py::test_list_namespaces_basic": CROSS_USER,
    "test_inmemory_store.py::test_list_namespaces_with_wildcards": CROSS_USER,
    "test_inmemory_store.py::test_list_namespaces_max_depth": CROSS_USER,
    "test_inmemory_store.py::test_list_namespaces_no_conditions": CROSS_USER,
    "test_inmemory_store.py::test_list_namespaces_empty_store": CROSS_USER,
    "test_inmemory_store.py::test_search_and_listing_keep_empty_prefixes_and_wildcards": CROSS_USER,
    "test_inmemory_store.py::test_async_search_and_listing_keep_empty_prefixes_and_wildcards": CROSS_USER,
    "test_inmemory_store.py::test_embed_with_path": ONE_VECTOR,
    "test_sqlite_store.py::test_batch_order": CROSS_USER,
    "test_sqlite_store.py::test_batch_list_namespaces_ops": CROSS_USER,
    "test_sqlite_store.py::TestSqliteStore::test_list_namespaces": CROSS_USER,
    "test_sqlite_store.py::test_scores": CROSS_USER,
    "test_sqlite_store.py::test_list_namespaces_operations": CROSS_USER,
    "test_sqlite_store.py::test_list_namespaces_segment_boundary": CROSS_USER,
    "test_sqlite_store.py::test_search_empty_prefix_is_unconstrained": CROSS_USER,
    "test_sqlite_store.py::test_namespace_labels_with_trailing_newline": CROSS_USER,
    "test_sqlite_store.py::test_batch_allows_empty_search_prefix_and_listing_wildcards": CROSS_USER,
    "test_sqlite_store.py::test_embed_with_path": ONE_VECTOR,
    "test_sqlite_store.py::test_sql_injection_vulnerability": FILTER_KEYS,
    "test_sqlite_async_store.py::test_abatch_order": CROSS_USER,
    "test_sqlite_async_store.py::test_batch_list_namespaces_ops": CROSS_USER,
    "test_sqlite_async_store.py::test_list_namespaces": CROSS_USER,
    "test_sqlite_async_store.py::test_async_namespace_segment_boundary": CROSS_USER,
    "test_sqlite_async_store.py::test_embed_with_path": ONE_VECTOR,
}
