"""``python -m bench.http_api``: see :mod:`bench.http_api.run`."""

from bench.http_api.run import main

if __name__ == "__main__":
    raise SystemExit(main())
