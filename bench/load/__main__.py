"""``python -m bench.load``: see :mod:`bench.load.run`."""

from bench.load.run import main

if __name__ == "__main__":
    raise SystemExit(main())
