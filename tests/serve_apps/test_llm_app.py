"""The vLLM extractor app's config (no vLLM here: only the generated LLMConfig arguments are checked)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from memcore.settings import load_settings
from serve_apps.llm_app import LLMAppArgs, llm_config

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = ROOT / "configs" / "llm.production.yaml"


def test_llm_config_enables_tool_calling() -> None:
    config = llm_config({"model_source": "/models/qwen", "tool_call_parser": "hermes", "max_model_len": 8192,
                         "tensor_parallel_size": 2, "accelerator_type": "H100", "min_replicas": 1,
                         "max_replicas": 3})
    assert config == {
        "model_loading_config": {"model_id": "memcluster-extractor", "model_source": "/models/qwen"},
        "engine_kwargs": {"enable_auto_tool_choice": True, "tool_call_parser": "hermes", "max_model_len": 8192,
                          "tensor_parallel_size": 2, "gpu_memory_utilization": 0.9, "dtype": "auto",
                          "enable_prefix_caching": True},
        "deployment_config": {"autoscaling_config": {"min_replicas": 1, "max_replicas": 3,
                                                     "target_ongoing_requests": 16}},
        "accelerator_type": "H100",
    }


def test_llm_config_defaults_and_overrides() -> None:
    config = llm_config(LLMAppArgs(model_source="Qwen/Qwen2.5-0.5B-Instruct", tool_call_parser="llama3_json",
                                   engine_kwargs={"max_num_seqs": 64, "dtype": "bfloat16"}))
    assert "accelerator_type" not in config  # any GPU
    assert config["engine_kwargs"]["tool_call_parser"] == "llama3_json"
    assert config["engine_kwargs"]["max_num_seqs"] == 64 and config["engine_kwargs"]["dtype"] == "bfloat16"


@pytest.mark.parametrize("bad", [{}, {"model_source": ""}, {"model_source": "m", "min_replicas": 3, "max_replicas": 2},
                                 {"model_source": "m", "unknown": 1}, {"model_source": "m", "max_model_len": 10}])
def test_bad_args_are_rejected(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        LLMAppArgs.model_validate(bad)


def test_module_imports_neither_ray_nor_vllm() -> None:
    code = ("import sys, serve_apps.llm_app as m; m.llm_config({'model_source': 'x'}); "
            "bad = sorted(n for n in sys.modules if n.split('.')[0] in ('ray', 'vllm')); assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_production_config_wires_the_extractor_to_the_llm_app() -> None:
    config = yaml.safe_load(PRODUCTION.read_text(encoding="utf-8"))
    apps = {a["name"]: a for a in config["applications"]}
    llm, memory = apps["extractor-llm"], apps["memcluster"]
    assert llm["import_path"] == "serve_apps.llm_app:build_llm_app"
    generated = llm_config(llm["args"])
    assert generated["engine_kwargs"]["enable_auto_tool_choice"] is True
    assert memory["import_path"] == "serve_apps.builder:build_app"
    settings = load_settings(**memory["args"]["settings"])
    port = config["http_options"]["port"]
    assert settings.extractor.base_url == f"http://127.0.0.1:{port}{llm['route_prefix']}/v1"
    assert settings.extractor.model == generated["model_loading_config"]["model_id"]
