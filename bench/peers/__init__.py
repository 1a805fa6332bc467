"""memcluster and its peers side by side on LoCoMo, in one run on one machine (``python -m bench.peers``;
:mod:`~bench.peers.run`, report :mod:`~bench.peers.report`)."""
