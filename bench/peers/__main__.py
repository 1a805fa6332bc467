"""``python -m bench.peers``: see :mod:`bench.peers.run`."""

from bench.peers.run import main

if __name__ == "__main__":
    raise SystemExit(main())
