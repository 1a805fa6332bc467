"""``python -m bench.relevance``: see :mod:`bench.relevance.run`."""

from bench.relevance.run import main

if __name__ == "__main__":
    raise SystemExit(main())
