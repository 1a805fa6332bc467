"""``python -m bench.extraction``: see :mod:`bench.extraction.run`."""

from bench.extraction.run import main

if __name__ == "__main__":
    raise SystemExit(main())
