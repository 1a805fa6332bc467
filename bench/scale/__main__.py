"""``python -m bench.scale``: see :mod:`bench.scale.run`."""

from bench.scale.run import main

if __name__ == "__main__":
    raise SystemExit(main())
