"""An Embedder that calls the Serve embedder deployment, so shard actors need no model in memory."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from memcore.ports import Vectors

BULK_THRESHOLD = 16


class RemoteEmbedder:
    """Proxy to a Serve deployment exposing ``describe()``, ``embed_passages(texts)``, ``embed_queries(texts)``.

    Picklable: the deployment handle is looked up lazily in the process that uses it.
    """

    def __init__(self, app_name: str, deployment_name: str) -> None:
        self.app_name = app_name
        self.deployment_name = deployment_name
        self._handle: Any = None
        self._info: dict[str, Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"app_name": self.app_name, "deployment_name": self.deployment_name}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["app_name"], state["deployment_name"])  # type: ignore[misc]

    def _h(self) -> Any:
        if self._handle is None:
            from ray import serve

            self._handle = serve.get_deployment_handle(self.deployment_name, app_name=self.app_name)
        return self._handle

    def _describe(self) -> dict[str, Any]:
        if self._info is None:
            self._info = dict(self._h().describe.remote().result())
        return self._info

    @property
    def name(self) -> str:
        return str(self._describe()["name"])

    @property
    def dim(self) -> int:
        return int(self._describe()["dim"])

    def embed_passages(self, texts: Sequence[str]) -> Vectors:
        if len(texts) > BULK_THRESHOLD:
            return np.asarray(self._h().embed_passages_many.remote(list(texts)).result(), dtype=np.float32)
        return self._call("embed_passages", texts)

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        return self._call("embed_queries", texts)

    def _call(self, method: str, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        rows = [getattr(self._h(), method).remote(t) for t in texts]
        return np.stack([np.asarray(r.result(), dtype=np.float32) for r in rows])
