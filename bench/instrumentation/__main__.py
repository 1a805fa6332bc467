"""``python -m bench.instrumentation``: see :mod:`bench.instrumentation.run`."""

from bench.instrumentation.run import main

if __name__ == "__main__":
    raise SystemExit(main())
