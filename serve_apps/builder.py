"""Application builder for Ray Serve: ``import_path: serve_apps.builder:build_app``.

Typed arguments (:class:`AppArgs`) come from the Serve config's ``args``; heavy imports
(the embedder model) happen only inside replicas.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from ray import serve
from ray.serve import Application

from memcore.settings import Settings, load_settings
from serve_apps.embedder import DEPLOYMENT_NAME as EMBEDDER_NAME
from serve_apps.embedder import EmbedderDeployment
from serve_apps.ingress import IngressDeployment

INGRESS_NAME = "Ingress"


class AppArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    settings_file: str | None = None
    """Optional YAML settings file; the environment (``MEMCLUSTER_*``) and ``settings`` override it."""
    settings: dict[str, Any] = Field(default_factory=dict)
    ingress_num_cpus: float = Field(default=0.1, ge=0)
    embedder_num_cpus: float = Field(default=0.5, ge=0)
    max_ongoing_requests: int = Field(default=64, ge=1)
    ingress_autoscaling: dict[str, Any] | None = None
    """A Serve ``autoscaling_config`` for the ingress (replaces ``settings.ingress_replicas``)."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(settings: Settings) -> None:
    """With no API keys configured, refuse to listen anywhere but loopback."""
    if not settings.api_keys and not is_loopback(settings.http.host):
        raise ValueError(
            f"http.host={settings.http.host!r} with no api_keys configured: memcluster only binds "
            "127.0.0.1 without keys; set MEMCLUSTER_API_KEYS or use 127.0.0.1"
        )


def resolve_settings(args: AppArgs) -> Settings:
    settings = load_settings(args.settings_file, **args.settings)
    check_exposure(settings)
    return settings.model_copy(update={"data_dir": settings.data_dir.expanduser().resolve()})


def build_app(args: AppArgs | dict[str, Any] | None = None) -> Application:
    parsed = AppArgs.model_validate(args or {})
    settings = resolve_settings(parsed)
    embedder = serve.deployment(
        EmbedderDeployment,
        name=EMBEDDER_NAME,
        num_replicas=settings.embedder_replicas,
        ray_actor_options={"num_cpus": parsed.embedder_num_cpus},
        max_ongoing_requests=256,
    ).bind(settings.embedder.model_dump(mode="json") | _secret(settings))  # type: ignore[attr-defined]
    ingress_opts: dict[str, Any] = {
        "name": INGRESS_NAME,
        "ray_actor_options": {"num_cpus": parsed.ingress_num_cpus},
        "max_ongoing_requests": parsed.max_ongoing_requests,
    }
    if parsed.ingress_autoscaling:
        ingress_opts["autoscaling_config"] = parsed.ingress_autoscaling
    else:
        ingress_opts["num_replicas"] = settings.ingress_replicas
    ingress_cls = serve.ingress()(IngressDeployment)
    return serve.deployment(ingress_cls, **ingress_opts).bind(settings, embedder)  # type: ignore[attr-defined]


def _secret(settings: Settings) -> dict[str, Any]:
    key = settings.embedder.api_key
    return {"api_key": key.get_secret_value()} if key else {}
