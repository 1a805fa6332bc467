"""The HTTP benchmark: search and add through the Ray Serve API beside the in-process engine
(``python -m bench.http_api``; :mod:`~bench.http_api.run`, report :mod:`~bench.http_api.report`)."""
