"""The HTTP ingress deployment: the FastAPI app of :mod:`serve_apps.http.app` over the shard actors."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from ray import serve

from actors.metrics import install as install_metrics
from actors.remote_embedder import RemoteEmbedder
from actors.router import RayShardBackend
from memcore.factory import build_embedder
from memcore.ports import Embedder
from memcore.settings import Settings
from serve_apps.embedder import DEPLOYMENT_NAME as EMBEDDER_NAME
from serve_apps.http.app import attach, create_app


def build_query_embedder(settings: Settings) -> Embedder | None:
    """The ingress's own query embedder (``http.embed_queries_in_ingress``; else None: shards embed), with
    ``http.query_embedder_threads`` intra-op threads instead of the batch embedders' ``embedder.threads``."""
    if not settings.http.embed_queries_in_ingress:
        return None
    return build_embedder(settings.embedder.model_copy(update={"threads": settings.http.query_embedder_threads}))


class IngressDeployment:
    """A plain class; the builder wraps it with ``serve.ingress()`` and ``serve.deployment``.

    The ASGI app is built per replica (``__serve_build_asgi_app__``), after the constructor
    has created the shard router, so no FastAPI app or settings exist at import time.
    """

    def __init__(self, settings: Settings | dict[str, Any], embedder: Any = None) -> None:
        self.settings = Settings.model_validate(settings)
        install_metrics()
        app_name = serve.get_replica_context().app_name
        self.backend = RayShardBackend(self.settings, lambda: RemoteEmbedder(app_name, EMBEDDER_NAME))
        self.backend.ensure_all()
        self._embedder = embedder  # keeps the bound Embedder deployment a dependency of this app
        self._asgi = create_app()
        attach(self._asgi, self.backend, self.settings, build_query_embedder(self.settings))

    def __serve_build_asgi_app__(self) -> FastAPI:
        return self._asgi
