"""``python -m bench.reshard``: see :mod:`bench.reshard.run`."""

from bench.reshard.run import main

if __name__ == "__main__":
    raise SystemExit(main())
