"""The relevance benchmark: does a hit's ``relevance`` (:mod:`memcore.relevance`) tell a matching memory from
an unrelated one, and what does a floor on it cost in recall? LoCoMo, own user vs another user.

- ``python -m bench.relevance`` (:mod:`~bench.relevance.run`): AUC of own vs cross top hits, the share of
  cross-user searches each floor empties, own-user session recall any@5 with and without the floor;
- ``python -m bench.relevance.report RUN.json``: the markdown and PNG again from a saved run.
"""
