"""``python -m bench.retrieval``: see :mod:`bench.retrieval.run`."""

from bench.retrieval.run import main

if __name__ == "__main__":
    raise SystemExit(main())
