"""``python -m bench.engine``: see :mod:`bench.engine.run`."""

from bench.engine.run import main

if __name__ == "__main__":
    raise SystemExit(main())
