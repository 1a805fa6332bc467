"""Render the KubeRay ``serveConfigV2`` from the Serve configs in ``configs/`` (one source).

``configs/serve.production.yaml`` is what a production cluster deploys; the RayService manifest
embeds a rendering of it and is never edited by hand::

  memctl k8s-config                 # print the serveConfigV2 of k8s/base/rayservice.yaml
  memctl k8s-config --write         # rewrite the serveConfigV2 blocks of every target manifest
  memctl k8s-config --check         # exit 1 when a manifest drifted from its rendering

Rendering does what ``memctl up`` does with a Serve config, minus what must stay out of a manifest:

- each app's ``args.settings.http`` gets host/port from ``http_options`` (as ``deploy.load_plan``
  does), so the builder's exposure check sees the real bind address (0.0.0.0 needs API keys);
- nothing is read from the environment and no secret is resolved: on Kubernetes the pods'
  environment (Secrets, the ``memcluster-env`` ConfigMap) supplies them when the builder runs;
- the vLLM extractor application(s) of ``configs/llm.production.yaml`` are appended: its
  applications that run ``serve_apps.llm_app:build_llm_app`` (or, for a plain mapping, one such
  app with the mapping as args);
- an overlay may deep-merge small overrides per app (``k8s/overlays/local/serve-overrides.yaml``).

Pure: YAML and dicts only, importable without Ray.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from memcore.settings import deep_merge

ROOT = Path(__file__).resolve().parent.parent
PRODUCTION_CONFIG = ROOT / "configs" / "serve.production.yaml"
LOCAL_CONFIG = ROOT / "configs" / "serve.local.yaml"
LLM_CONFIG = ROOT / "configs" / "llm.production.yaml"
LLM_IMPORT_PATH = "serve_apps.llm_app:build_llm_app"
LLM_APP_NAME = "extractor"
LLM_ROUTE_PREFIX = "/llm"
KEY = "serveConfigV2"


@dataclass(frozen=True)
class Target:
    """A manifest file holding a ``serveConfigV2`` block, and how that block is rendered."""

    manifest: Path
    config: Path = PRODUCTION_CONFIG
    llm_config: Path | None = LLM_CONFIG
    overrides: Path | None = None


TARGETS: dict[str, Target] = {
    "base": Target(ROOT / "k8s" / "base" / "rayservice.yaml"),
    "local": Target(
        ROOT / "k8s" / "overlays" / "local" / "rayservice-patch.yaml",
        llm_config=None,
        overrides=ROOT / "k8s" / "overlays" / "local" / "serve-overrides.yaml",
    ),
}


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _mapping(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ValueError(f"{path} does not exist")
    data = load_yaml(path) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping at the top level")
    return data


def llm_applications(path: Path | None) -> list[dict[str, Any]]:
    """The extractor application(s) of ``path``.

    A Serve config contributes its applications that run :data:`LLM_IMPORT_PATH` (any other app
    in it, e.g. a copy of the memcluster app, is ignored: serve.production.yaml is the source of
    that one); any other mapping becomes the args of one such app; no file, one app without args.
    """
    if path is None:
        return []
    data = _mapping(path) if path.is_file() else {}
    if "applications" in data:
        apps = data["applications"] or []
        if not isinstance(apps, list):
            raise ValueError(f"{path}: applications must be a list")
        llm = [copy.deepcopy(a) for a in apps if isinstance(a, dict) and a.get("import_path") == LLM_IMPORT_PATH]
        if not llm:
            raise ValueError(f"{path}: no application with import_path {LLM_IMPORT_PATH}")
        return llm
    return [{"name": LLM_APP_NAME, "route_prefix": LLM_ROUTE_PREFIX, "import_path": LLM_IMPORT_PATH,
             "args": copy.deepcopy(data)}]


def _apply_overrides(config: dict[str, Any], overrides: dict[str, Any], source: Path) -> dict[str, Any]:
    per_app = overrides.get("applications") or {}
    if not isinstance(per_app, dict):
        raise ValueError(f"{source}: applications must map an app name to the fields to override")
    out = deep_merge(config, {k: v for k, v in overrides.items() if k != "applications"})
    names = [a["name"] for a in out["applications"]]
    unknown = sorted(set(per_app) - set(names))
    if unknown:
        raise ValueError(f"{source}: overrides for unknown applications {unknown}; known: {names}")
    out["applications"] = [deep_merge(a, per_app.get(a["name"]) or {}) for a in out["applications"]]
    return out


def render(
    config: Path = PRODUCTION_CONFIG, *, llm_config: Path | None = LLM_CONFIG, overrides: Path | None = None
) -> dict[str, Any]:
    """The serveConfigV2 as data (see the module docstring for what changes)."""
    data = _mapping(config)
    apps = data.get("applications") or []
    if not apps:
        raise ValueError(f"{config}: no applications")
    out: dict[str, Any] = {k: copy.deepcopy(v) for k, v in data.items() if k != "applications"}
    http = out.get("http_options") or {}
    rendered = []
    for app in apps:
        app = copy.deepcopy(app)
        args = app.setdefault("args", {})
        settings = args.setdefault("settings", {})
        bind = {k: http[k] for k in ("host", "port") if k in http}
        settings["http"] = {**bind, **(settings.get("http") or {})}
        rendered.append(app)
    out["applications"] = rendered + llm_applications(llm_config)
    if overrides is not None:
        out = _apply_overrides(out, _mapping(overrides), overrides)
    names = [a.get("name") for a in out["applications"]]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate application names in the rendered config: {names}")
    return out


def dump(config: dict[str, Any]) -> str:
    return str(yaml.safe_dump(config, sort_keys=False, default_flow_style=False, width=100))


def render_target(target: Target) -> str:
    return dump(render(target.config, llm_config=target.llm_config, overrides=target.overrides))


_KEY_LINE = re.compile(rf"^(?P<indent> *){KEY}: *\|[-+]? *$")


def embed(manifest: str, serve_yaml: str) -> str:
    """``manifest`` with its one ``serveConfigV2: |`` block replaced by ``serve_yaml``."""
    lines = manifest.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if _KEY_LINE.match(line.rstrip("\n"))]
    if len(hits) != 1:
        raise ValueError(f"expected exactly one '{KEY}: |' line, found {len(hits)}")
    start = hits[0]
    match = _KEY_LINE.match(lines[start].rstrip("\n"))
    assert match is not None
    indent = len(match.group("indent"))
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip(" ")) > indent):
        end += 1
    while end > start + 1 and not lines[end - 1].strip():  # keep blank lines after the block
        end -= 1
    pad = " " * (indent + 2)
    body = [f"{pad}{line}\n" if line else "\n" for line in serve_yaml.splitlines()]
    head = lines[: start + 1]
    if head and not head[-1].endswith("\n"):
        head[-1] += "\n"
    return "".join(head + body + lines[end:])


def embedded(manifest: Path) -> str:
    """The ``serveConfigV2`` string of the one document in ``manifest`` that has one."""
    found = [
        doc["spec"][KEY]
        for doc in yaml.safe_load_all(manifest.read_text(encoding="utf-8"))
        if isinstance(doc, dict) and isinstance(doc.get("spec"), dict) and KEY in doc["spec"]
    ]
    if len(found) != 1:
        raise ValueError(f"{manifest}: expected one document with spec.{KEY}, found {len(found)}")
    value = found[0]
    if not isinstance(value, str):
        raise ValueError(f"{manifest}: spec.{KEY} must be a string (a YAML block scalar)")
    return value


def drift(targets: dict[str, Target] | None = None) -> list[str]:
    """Names of the targets whose manifest differs from its rendering."""
    return [name for name, t in (targets or TARGETS).items() if embedded(t.manifest) != render_target(t)]


def write(targets: dict[str, Target] | None = None) -> list[Path]:
    """Rewrite every target's serveConfigV2 block; returns the files that changed."""
    changed = []
    for t in (targets or TARGETS).values():
        text = t.manifest.read_text(encoding="utf-8")
        new = embed(text, render_target(t))
        if new != text:
            t.manifest.write_text(new, encoding="utf-8")
            changed.append(t.manifest)
    return changed


def app_structure(config: Path) -> list[tuple[str, str, str]]:
    """(name, route_prefix, import_path) of every application of a Serve config."""
    apps = _mapping(config).get("applications") or []
    return [(a["name"], a.get("route_prefix", "/"), a["import_path"]) for a in apps]
