"""``python -m bench.graph``: see :mod:`bench.graph.run`."""

from bench.graph.run import main

if __name__ == "__main__":
    raise SystemExit(main())
