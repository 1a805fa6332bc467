"""The extractor model as a Ray Serve app: vLLM behind ``ray.serve.llm``'s OpenAI-compatible routes.

``import_path: serve_apps.llm_app:build_llm_app`` with :class:`LLMAppArgs` as ``args``. The app
serves ``<route_prefix>/v1/chat/completions`` with tool calling on (vLLM's
``enable_auto_tool_choice`` plus a ``tool_call_parser`` that matches the model family: ``hermes``
for Qwen2.5 / Hermes, ``llama3_json`` for Llama 3.x, ``mistral`` for Mistral); point
``extractor.base_url`` at ``http://<serve host>:<port><route_prefix>/v1`` and
``extractor.model`` at ``model_id``.

Nothing here imports Ray or vLLM at module import: :func:`llm_config` is a pure function (the
tests check its output), and :func:`build_llm_app` imports ``ray.serve.llm`` only when called,
in a Ray cluster with GPUs and ``ray[llm]`` (vLLM) installed.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class LLMAppArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    model_id: str = Field(default="memcluster-extractor", min_length=1)
    """The name clients send as ``model`` (``extractor.model``)."""
    model_source: str = Field(min_length=1)
    """Where the weights are: a local path (production clusters have no internet) or a hub id."""
    tool_call_parser: str = Field(default="hermes", min_length=1)
    max_model_len: int = Field(default=16_384, ge=512)
    tensor_parallel_size: int = Field(default=1, ge=1, le=64)
    """GPUs per replica."""
    accelerator_type: str | None = None
    """Ray accelerator type the replicas must land on, e.g. ``H100``, ``A100``, ``L4`` (None: any GPU)."""
    gpu_memory_utilization: float = Field(default=0.90, gt=0, le=1)
    dtype: str = "auto"
    enable_prefix_caching: bool = True
    """The extraction system prompt is shared by every job: prefix caching pays off."""
    min_replicas: int = Field(default=1, ge=0)
    max_replicas: int = Field(default=1, ge=1)
    target_ongoing_requests: int = Field(default=16, ge=1)
    engine_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Extra vLLM engine arguments (override the ones above)."""

    def model_post_init(self, _context: Any) -> None:
        if self.min_replicas > self.max_replicas:
            raise ValueError("min_replicas must not exceed max_replicas")


def llm_config(args: LLMAppArgs | dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of ``ray.serve.llm.LLMConfig`` for ``args`` (pure; no Ray, no vLLM)."""
    a = LLMAppArgs.model_validate(args)
    engine: dict[str, Any] = {
        "enable_auto_tool_choice": True,
        "tool_call_parser": a.tool_call_parser,
        "max_model_len": a.max_model_len,
        "tensor_parallel_size": a.tensor_parallel_size,
        "gpu_memory_utilization": a.gpu_memory_utilization,
        "dtype": a.dtype,
        "enable_prefix_caching": a.enable_prefix_caching,
        **a.engine_kwargs,
    }
    config: dict[str, Any] = {
        "model_loading_config": {"model_id": a.model_id, "model_source": a.model_source},
        "engine_kwargs": engine,
        "deployment_config": {
            "autoscaling_config": {
                "min_replicas": a.min_replicas,
                "max_replicas": a.max_replicas,
                "target_ongoing_requests": a.target_ongoing_requests,
            },
        },
    }
    if a.accelerator_type:
        config["accelerator_type"] = a.accelerator_type
    return config


def build_llm_app(args: LLMAppArgs | dict[str, Any] | None = None) -> Any:
    """The Serve application (OpenAI-compatible router + vLLM deployment). Needs ``ray[llm]``."""
    config = llm_config(args or {})
    try:
        from ray.serve.llm import LLMConfig, build_openai_app
    except ImportError as exc:  # vLLM (ray[llm]) is only installed on GPU clusters
        raise ImportError(f"the extractor LLM app needs ray[llm] (vLLM) in the cluster image: {exc}") from exc
    return build_openai_app({"llm_configs": [LLMConfig(**config)]})
