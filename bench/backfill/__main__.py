"""``python -m bench.backfill``: see :mod:`bench.backfill.run`."""

from bench.backfill.run import main

if __name__ == "__main__":
    raise SystemExit(main())
