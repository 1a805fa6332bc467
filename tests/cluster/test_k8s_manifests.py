"""The Kubernetes manifests under k8s/, checked without a cluster (PyYAML only; `kubectl kustomize`
and Ray's config schemas are used when they are installed).

- every YAML file is well-formed; kustomizations name only files that exist;
- the RayService's serveConfigV2 IS the rendering of configs/serve.production.yaml
  (cluster/k8s_config.py, `memctl k8s-config`), so the two cannot drift; the local overlay's
  likewise; serve.local.yaml and serve.production.yaml deploy the same applications;
- required fields of RayService, RayJob, StatefulSet; Services and policies select pods that exist;
  referenced Secrets and ConfigMaps exist; every container has requests and limits; images pinned.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml

from cluster import k8s_config
from memcore.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
BASE = K8S / "base"
RAYSERVICE = BASE / "rayservice.yaml"
RAYJOBS = K8S / "jobs" / "rayjob.yaml"
SECRETS = K8S / "secrets.template.yaml"
OVERLAYS = {"local": K8S / "overlays" / "local", "production": K8S / "overlays" / "production"}

Doc = dict[str, Any]
SECRET_NAMES = {"memcluster-api-keys", "qdrant-api-key", "memcluster-postgres", "redis-password"}


# ----------------------------------------------------------------------------------------- helpers
def yaml_files() -> list[Path]:
    return sorted(p for p in K8S.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())


def docs_of(path: Path) -> list[Doc]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]


def patch_files() -> set[Path]:
    """Files that kustomizations use as patches (partial objects, not resources)."""
    out = set()
    for k in K8S.rglob("kustomization.yaml"):
        for patch in docs_of(k)[0].get("patches") or []:
            if "path" in patch:
                out.add((k.parent / patch["path"]).resolve())
    return out


def resources(paths: list[Path] | None = None) -> list[Doc]:
    """Every Kubernetes object (a mapping with apiVersion and kind) in the given files, patches excepted."""
    out = []
    patches = patch_files()
    for p in paths or yaml_files():
        if p.name == "kustomization.yaml" or p.resolve() in patches:
            continue
        out += [d for d in docs_of(p) if isinstance(d, dict) and "kind" in d and "apiVersion" in d]
    return out


def of_kind(docs: list[Doc], kind: str) -> list[Doc]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[Doc], kind: str) -> Doc:
    found = of_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def rayservice() -> Doc:
    return one(docs_of(RAYSERVICE), "RayService")


def ray_groups(cluster_spec: Doc) -> list[tuple[str, Doc]]:
    """(group name, group spec) of the head and every worker group of a RayCluster spec."""
    groups = [("head", cluster_spec["headGroupSpec"])]
    return groups + [(w["groupName"], w) for w in cluster_spec.get("workerGroupSpecs") or []]


def pod_templates(doc: Doc) -> Iterator[tuple[str, Doc]]:
    """(where, pod template) of every pod template an object defines."""
    kind, spec = doc["kind"], doc.get("spec") or {}
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
        yield kind, spec["template"]
    elif kind == "CronJob":
        yield kind, spec["jobTemplate"]["spec"]["template"]
    elif kind == "RayService":
        for name, g in ray_groups(spec["rayClusterConfig"]):
            yield f"RayService group {name}", g["template"]
    elif kind == "RayJob":
        if spec.get("rayClusterSpec"):
            for name, g in ray_groups(spec["rayClusterSpec"]):
                yield f"RayJob group {name}", g["template"]
        if spec.get("submitterPodTemplate"):
            yield "RayJob submitter", spec["submitterPodTemplate"]


def containers(docs: list[Doc]) -> Iterator[tuple[str, Doc]]:
    for d in docs:
        for where, tpl in pod_templates(d):
            pod = tpl.get("spec") or {}
            for c in (pod.get("initContainers") or []) + (pod.get("containers") or []):
                yield f"{d['kind']}/{d['metadata']['name']} {where} container {c.get('name')}", c


def walk(node: Any) -> Iterator[tuple[str, Any]]:
    """Every (key, value) pair of a nested structure."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield k, v
            yield from walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from walk(v)


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def pod_labels(docs: list[Doc]) -> list[dict[str, str]]:
    return [(tpl.get("metadata") or {}).get("labels") or {} for d in docs for _, tpl in pod_templates(d)]


def module_file(import_path: str) -> Path | None:
    module = import_path.partition(":")[0]
    rel = Path(*module.split("."))
    for cand in (ROOT / rel.with_suffix(".py"), ROOT / rel / "__init__.py"):
        if cand.is_file():
            return cand
    return None


def app_args_fields() -> set[str]:
    """Field names of serve_apps.builder.AppArgs, read from the source (no Ray import)."""
    tree = ast.parse((ROOT / "serve_apps" / "builder.py").read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "AppArgs")
    return {s.target.id for s in cls.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}


def ray_pin() -> str:
    m = re.search(r'"ray\[[^\]]*\]==([0-9.]+)"', (ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert m, "pyproject.toml pins ray"
    return m.group(1)


def served(doc: Doc) -> Doc:
    parsed = yaml.safe_load(doc["spec"]["serveConfigV2"])
    assert isinstance(parsed, dict)
    return parsed


def app(config: Doc, import_path: str) -> Doc:
    found: list[Doc] = [a for a in config["applications"] if a["import_path"] == import_path]
    assert len(found) == 1, f"expected one application {import_path}"
    return found[0]


# ------------------------------------------------------------------------------- files, kustomize
@pytest.mark.parametrize("path", yaml_files(), ids=lambda p: str(p.relative_to(K8S)))
def test_yaml_is_well_formed(path: Path) -> None:
    docs = docs_of(path)
    assert docs, f"{path} holds no document"
    for d in docs:
        assert isinstance(d, dict), f"{path}: every document is a mapping"
        if "kind" in d:
            assert d.get("apiVersion"), f"{path}: {d['kind']} without apiVersion"
            if d["kind"] != "Kustomization":
                assert (d.get("metadata") or {}).get("name"), f"{path}: {d['kind']} without metadata.name"


def test_kustomizations_name_existing_files() -> None:
    kustomizations = sorted(K8S.rglob("kustomization.yaml"))
    assert {p.parent for p in kustomizations} >= {BASE, *OVERLAYS.values()}
    for k in kustomizations:
        spec = docs_of(k)[0]
        assert spec.get("kind") == "Kustomization", k
        for res in spec.get("resources") or []:
            target = (k.parent / res).resolve()
            assert target.exists(), f"{k}: resource {res} does not exist"
            if target.is_dir():
                assert (target / "kustomization.yaml").is_file(), f"{k}: {res} is not a kustomization"
        for patch in spec.get("patches") or []:
            assert "path" in patch or "patch" in patch, f"{k}: a patch needs path or patch"
            if "path" in patch:
                assert (k.parent / patch["path"]).is_file(), f"{k}: patch {patch['path']} does not exist"
            else:
                ops = yaml.safe_load(patch["patch"])
                assert isinstance(ops, list) and ops and all("op" in o and "path" in o for o in ops), k
                assert patch.get("target", {}).get("kind"), f"{k}: an inline JSON patch needs a target kind"


def test_overlays_shape() -> None:
    prod = docs_of(OVERLAYS["production"] / "kustomization.yaml")[0]
    local = docs_of(OVERLAYS["local"] / "kustomization.yaml")[0]
    for spec in (prod, local):
        assert spec["namespace"] == "memcluster"
        assert "../../base" in spec["resources"]
    patch = one(docs_of(OVERLAYS["local"] / "rayservice-patch.yaml"), "RayService")
    cluster = patch["spec"]["rayClusterConfig"]
    assert cluster["workerGroupSpecs"] == [], "local: one head, no worker groups (no GPU)"
    qdrant = one(docs_of(OVERLAYS["local"] / "qdrant-patch.yaml"), "StatefulSet")
    assert qdrant["spec"]["replicas"] == 1
    # The local head patch replaces resources by index: make sure index 0 is the head container.
    head = rayservice()["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"]
    assert head[0]["name"] == "ray-head"


# ---------------------------------------------------------------------- one source: serveConfigV2
@pytest.mark.parametrize("name", sorted(k8s_config.TARGETS))
def test_serve_config_v2_is_the_rendering_of_configs(name: str) -> None:
    target = k8s_config.TARGETS[name]
    assert k8s_config.embedded(target.manifest) == k8s_config.render_target(target), (
        f"{target.manifest} drifted from configs/: run `memctl k8s-config --write`"
    )
    assert k8s_config.drift({name: target}) == []


def test_local_and_production_configs_deploy_the_same_applications() -> None:
    local, prod = k8s_config.LOCAL_CONFIG, k8s_config.PRODUCTION_CONFIG
    assert k8s_config.app_structure(local) == k8s_config.app_structure(prod)
    fields = app_args_fields()
    for cfg in (local, prod):
        for a in yaml.safe_load(cfg.read_text(encoding="utf-8"))["applications"]:
            args = a.get("args") or {}
            assert set(args) <= fields, f"{cfg}: unknown AppArgs {sorted(set(args) - fields)}"
            Settings.model_validate(args.get("settings") or {})
    local_settings = yaml.safe_load(local.read_text(encoding="utf-8"))["applications"][0]["args"]["settings"]
    prod_settings = yaml.safe_load(prod.read_text(encoding="utf-8"))["applications"][0]["args"]["settings"]
    assert set(local_settings) <= set(prod_settings), "production sets at least what local sets"


def test_rendered_config_is_a_valid_serve_config() -> None:
    schema = pytest.importorskip("ray.serve.schema")
    autoscaling = pytest.importorskip("ray.serve.config")
    for target in k8s_config.TARGETS.values():
        rendered = k8s_config.render(target.config, llm_config=target.llm_config, overrides=target.overrides)
        schema.ServeDeploySchema.model_validate(rendered)
        memcluster = app(rendered, "serve_apps.builder:build_app")
        autoscaling.AutoscalingConfig(**memcluster["args"]["ingress_autoscaling"])


def test_builder_accepts_the_rendered_args(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the RayService deploys builds (no cluster needed), and only with API keys in the env."""
    pytest.importorskip("ray.serve")
    from serve_apps.builder import build_app

    for target in k8s_config.TARGETS.values():
        args = app(yaml.safe_load(k8s_config.render_target(target)), "serve_apps.builder:build_app")["args"]
        monkeypatch.delenv("MEMCLUSTER_API_KEYS", raising=False)
        with pytest.raises(ValueError, match="api_keys"):
            build_app(args)
        monkeypatch.setenv("MEMCLUSTER_API_KEYS", '{"demo": "k"}')
        assert build_app(args) is not None


def test_rendering_copies_the_bind_address_and_adds_the_extractor(tmp_path: Path) -> None:
    rendered = k8s_config.render()
    memcluster = app(rendered, "serve_apps.builder:build_app")
    assert memcluster["args"]["settings"]["http"] == {"host": "0.0.0.0", "port": 8000}
    assert app(rendered, k8s_config.LLM_IMPORT_PATH)
    assert k8s_config.LLM_IMPORT_PATH not in str(k8s_config.render(llm_config=None))
    # an LLM config that is a Serve config contributes its LLM applications only
    llm = tmp_path / "llm.yaml"
    llm.write_text(yaml.safe_dump({"applications": [
        {"name": "llm", "route_prefix": "/x", "import_path": k8s_config.LLM_IMPORT_PATH, "args": {"a": 1}},
        {"name": "memcluster", "route_prefix": "/", "import_path": "serve_apps.builder:build_app"}]}))
    apps = k8s_config.render(llm_config=llm)["applications"]
    assert [a["name"] for a in apps] == ["memcluster", "llm"] and apps[1]["route_prefix"] == "/x"
    llm.write_text(yaml.safe_dump({"applications": [
        {"name": "m", "route_prefix": "/", "import_path": "serve_apps.builder:build_app"}]}))
    with pytest.raises(ValueError, match="no application with import_path"):
        k8s_config.render(llm_config=llm)
    # an LLM config that is a plain mapping becomes the args of the extractor app
    llm.write_text(yaml.safe_dump({"model_id": "m", "model_source": "/models/m"}))
    extractor = app(k8s_config.render(llm_config=llm), k8s_config.LLM_IMPORT_PATH)
    assert extractor["args"] == {"model_id": "m", "model_source": "/models/m"}


def test_a_changed_config_is_detected_as_drift(tmp_path: Path) -> None:
    config = tmp_path / "serve.yaml"
    data = yaml.safe_load(k8s_config.PRODUCTION_CONFIG.read_text(encoding="utf-8"))
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    manifest = tmp_path / "rayservice.yaml"
    manifest.write_text(RAYSERVICE.read_text(encoding="utf-8"))
    target = {"t": k8s_config.Target(manifest, config=config)}
    assert k8s_config.drift(target) == []
    data["applications"][0]["args"]["settings"]["shards"] = 32
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    assert k8s_config.drift(target) == ["t"]
    assert k8s_config.write(target) == [manifest]
    assert k8s_config.drift(target) == []
    assert "shards: 32" in manifest.read_text(encoding="utf-8")
    # everything outside the block is kept byte for byte
    before, after = RAYSERVICE.read_text(encoding="utf-8"), manifest.read_text(encoding="utf-8")
    assert before.split("serveConfigV2: |")[0] == after.split("serveConfigV2: |")[0]
    assert before.split("  rayClusterConfig:")[1] == after.split("  rayClusterConfig:")[1]


def test_embed_replaces_only_the_block() -> None:
    text = "a:\n  serveConfigV2: |\n    old: 1\n\n    more: 2\n\n  next: 3\nb: 4\n"
    out = k8s_config.embed(text, "x: 1\ny:\n- 2\n")
    assert out == "a:\n  serveConfigV2: |\n    x: 1\n    y:\n    - 2\n\n  next: 3\nb: 4\n"
    assert yaml.safe_load(out)["a"]["serveConfigV2"] == "x: 1\ny:\n- 2\n"
    with pytest.raises(ValueError):
        k8s_config.embed("a: 1\n", "x: 1\n")


def test_overrides_must_name_known_applications(tmp_path: Path) -> None:
    bad = tmp_path / "o.yaml"
    bad.write_text("applications:\n  nope:\n    args: {}\n")
    with pytest.raises(ValueError, match="unknown applications"):
        k8s_config.render(overrides=bad)


def test_memctl_k8s_config_prints_and_checks(capsys: pytest.CaptureFixture[str]) -> None:
    from cluster import cli

    args = cli.parser().parse_args(["k8s-config"])
    assert args.func(args) == 0
    assert yaml.safe_load(capsys.readouterr().out) == k8s_config.render()
    args = cli.parser().parse_args(["k8s-config", "--no-llm", "--config", str(k8s_config.LOCAL_CONFIG)])
    assert args.func(args) == 0
    assert [a["import_path"] for a in yaml.safe_load(capsys.readouterr().out)["applications"]] == [
        "serve_apps.builder:build_app"]
    args = cli.parser().parse_args(["k8s-config", "--check"])
    assert args.func(args) == 0


# ------------------------------------------------------------------------------------- RayService
def test_rayservice_required_fields() -> None:
    rs = rayservice()
    assert rs["apiVersion"] == "ray.io/v1"
    spec = rs["spec"]
    cluster = spec["rayClusterConfig"]
    assert cluster["rayVersion"] == ray_pin(), "rayVersion must match the Ray pinned in pyproject.toml"
    head = cluster["headGroupSpec"]
    assert head["template"]["spec"]["containers"], "headGroupSpec needs a container"
    assert "rayStartParams" in head
    workers = cluster["workerGroupSpecs"]
    assert workers
    for w in workers:
        assert w["groupName"] and w["template"]["spec"]["containers"]
        assert w["minReplicas"] <= w["replicas"] <= w["maxReplicas"], w["groupName"]
    gpu = [w for w in workers if any(
        "nvidia.com/gpu" in (c.get("resources") or {}).get("limits", {}) for c in w["template"]["spec"]["containers"])]
    assert len(gpu) == 1, "one GPU worker group (nvidia.com/gpu in limits)"
    assert gpu[0]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
    cpu = [w for w in workers if w not in gpu]
    assert cpu, "a CPU worker group"
    assert cluster["enableInTreeAutoscaling"] is True


def test_rayservice_serve_config_apps() -> None:
    config = served(rayservice())
    names = [a["name"] for a in config["applications"]]
    assert len(names) == len(set(names))
    for a in config["applications"]:
        assert re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", a["import_path"]), a["import_path"]
        assert module_file(a["import_path"]) is not None, f"{a['import_path']}: no module file in the repository"
    memcluster = app(config, "serve_apps.builder:build_app")
    assert memcluster["args"]["ingress_autoscaling"]["max_replicas"] > memcluster["args"]["ingress_autoscaling"][
        "min_replicas"]
    settings = memcluster["args"]["settings"]
    assert settings["vector_store"]["backend"] == "server"
    assert settings["shards"] >= 1 and settings["embedder"]["kind"]
    Settings.model_validate(settings)
    assert app(config, k8s_config.LLM_IMPORT_PATH)


def test_vector_store_url_is_the_qdrant_service() -> None:
    docs = resources()
    settings = app(served(rayservice()), "serve_apps.builder:build_app")["args"]["settings"]
    url = urlparse(settings["vector_store"]["url"])
    svc = next(s for s in of_kind(docs, "Service") if s["metadata"]["name"] == url.hostname)
    assert svc["spec"].get("clusterIP") != "None", "the app talks to the ClusterIP Service, not the headless one"
    assert url.port in [p["port"] for p in svc["spec"]["ports"]]


def llm_args(config: Doc) -> Doc:
    args = app(config, k8s_config.LLM_IMPORT_PATH).get("args") or {}
    assert isinstance(args, dict)
    return args


def test_extractor_settings_point_at_the_llm_app() -> None:
    rs = rayservice()
    config = served(rs)
    extractor = app(config, k8s_config.LLM_IMPORT_PATH)
    settings = app(config, "serve_apps.builder:build_app")["args"]["settings"]["extractor"]
    url = urlparse(settings["base_url"])
    assert url.hostname == f"{rs['metadata']['name']}-serve-svc", "KubeRay's Serve Service of this RayService"
    assert url.port == config["http_options"]["port"]
    prefix = extractor.get("route_prefix") or "/"
    assert url.path.rstrip("/") == prefix.rstrip("/") + "/v1"
    ids = {v for k, v in walk(llm_args(config)) if k == "model_id"}
    if ids:  # the model the app serves, where its args name it
        assert settings["model"] in ids
    local = yaml.safe_load(k8s_config.embedded(k8s_config.TARGETS["local"].manifest))
    assert [a["import_path"] for a in local["applications"]] == ["serve_apps.builder:build_app"]
    assert local["applications"][0]["args"]["settings"]["extractor"]["base_url"] is None, "no LLM locally"


def test_gpu_group_fits_the_llm_app() -> None:
    spec = rayservice()["spec"]
    args = llm_args(served(rayservice()))
    gpu = next(w for w in spec["rayClusterConfig"]["workerGroupSpecs"] if w["groupName"] == "gpu")
    (c,) = gpu["template"]["spec"]["containers"]
    per_pod = c["resources"]["limits"]["nvidia.com/gpu"]
    need = int(args.get("max_replicas", 1)) * int(args.get("tensor_parallel_size", 1))
    assert gpu["maxReplicas"] * per_pod >= need, "the GPU group cannot hold the extractor's max replicas"
    source = args.get("model_source")
    if isinstance(source, str) and source.startswith("/"):
        mounts = [m["mountPath"] for m in c.get("volumeMounts") or []]
        assert any(source.startswith(m.rstrip("/") + "/") for m in mounts), f"{source} is not mounted on GPU pods"


def test_llm_app_args_validate() -> None:
    """The extractor app's args are what serve_apps.llm_app accepts (a pure module: no Ray, no vLLM)."""
    assert module_file(k8s_config.LLM_IMPORT_PATH) is not None
    from serve_apps.llm_app import LLMAppArgs

    LLMAppArgs.model_validate(llm_args(served(rayservice())))


def test_every_ray_container_sees_the_same_settings() -> None:
    """The app builder may run on any node: head and workers must share env and envFrom."""
    seen = []
    for _, c in containers([rayservice()]):
        seen.append((c.get("env"), c.get("envFrom")))
    assert len(seen) >= 3 and all(s == seen[0] for s in seen)


# ----------------------------------------------------------------------------------------- RayJob
def test_rayjobs_required_fields() -> None:
    jobs = of_kind(docs_of(RAYJOBS), "RayJob")
    assert {j["spec"]["entrypoint"].split()[1] for j in jobs} == {"backfill", "reextract"}
    for j in jobs:
        spec = j["spec"]
        assert j["apiVersion"] == "ray.io/v1"
        assert spec["entrypoint"].startswith("memctl ")
        assert "rayClusterSpec" in spec or "clusterSelector" in spec
        assert isinstance(spec["shutdownAfterJobFinishes"], bool)
        if "clusterSelector" in spec:
            assert spec["clusterSelector"].get("ray.io/cluster"), "KubeRay selects the cluster by ray.io/cluster"
            assert spec["shutdownAfterJobFinishes"] is False, "never tear down the RayService's cluster"
            assert "ttlSecondsAfterFinished" not in spec
        else:
            assert spec["rayClusterSpec"]["rayVersion"] == ray_pin()


def test_rayjobs_are_not_applied_by_a_kustomization() -> None:
    for k in K8S.rglob("kustomization.yaml"):
        for res in docs_of(k)[0].get("resources") or []:
            assert (k.parent / res).resolve() != RAYJOBS.resolve()


# -------------------------------------------------------------------------------- Qdrant, Services
def test_qdrant_statefulset() -> None:
    docs = resources()
    ss = next(d for d in of_kind(docs, "StatefulSet") if d["metadata"]["name"] == "qdrant")
    spec = ss["spec"]
    headless = next(s for s in of_kind(docs, "Service") if s["metadata"]["name"] == spec["serviceName"])
    assert headless["spec"].get("clusterIP") == "None", "serviceName must be a headless Service"
    tpl = spec["template"]
    assert selects(spec["selector"]["matchLabels"], tpl["metadata"]["labels"])
    claims = [v["metadata"]["name"] for v in spec["volumeClaimTemplates"]]
    assert claims and all(v["spec"]["resources"]["requests"]["storage"] for v in spec["volumeClaimTemplates"])
    volumes = {v["name"] for v in tpl["spec"].get("volumes") or []} | set(claims)
    (c,) = tpl["spec"]["containers"]
    assert {m["name"] for m in c["volumeMounts"]} <= volumes
    assert "/qdrant/storage" in {m["mountPath"] for m in c["volumeMounts"]}
    assert {6333, 6334} <= {p["containerPort"] for p in c["ports"]}
    assert re.fullmatch(r"qdrant/qdrant:v\d+\.\d+\.\d+", c["image"])
    probe = c["readinessProbe"]["httpGet"]
    assert (probe["path"], probe["port"]) == ("/readyz", 6333)


@pytest.mark.parametrize(("name", "port", "mount"), [("postgres", 5432, "/var/lib/postgresql/data"),
                                                     ("redis", 6379, "/data")])
def test_state_statefulsets(name: str, port: int, mount: str) -> None:
    """PostgreSQL (the cluster state) and Redis (GCS fault tolerance): one pod each on a PVC, reachable
    through a Service of the same name, only from memcluster's pods, its password from a Secret."""
    docs = resources()
    ss = next(d for d in of_kind(docs, "StatefulSet") if d["metadata"]["name"] == name)
    spec = ss["spec"]
    assert spec["replicas"] == 1 and spec["serviceName"] == name
    svc = next(s for s in of_kind(docs, "Service") if s["metadata"]["name"] == name)
    assert [p["port"] for p in svc["spec"]["ports"]] == [port]
    (claim,) = spec["volumeClaimTemplates"]
    (c,) = spec["template"]["spec"]["containers"]
    assert {m["name"]: m["mountPath"] for m in c["volumeMounts"]} == {claim["metadata"]["name"]: mount}
    assert re.fullmatch(rf"{name}:\d+(\.\d+)+", c["image"]), "a pinned release tag"
    assert c["readinessProbe"] and port in {p["containerPort"] for p in c["ports"]}
    assert any(k == "secretKeyRef" for k, _ in walk(c["env"])), "the password comes from a Secret"
    (policy,) = [p for p in of_kind(docs, "NetworkPolicy") if p["spec"]["podSelector"]["matchLabels"] ==
                 {"app.kubernetes.io/name": name}]
    (rule,) = policy["spec"]["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "memcluster"}}}]
    assert rule["ports"] == [{"port": port}]


def test_ray_pods_reach_the_cluster_state() -> None:
    """Every Ray container gets the archive DSN from the memcluster-postgres Secret; the RayService's GCS
    is fault tolerant on the redis Service (Ray's recommendation for RayService head restarts)."""
    rs = rayservice()
    for where, c in containers([rs]):
        dsn = [e for e in c["env"] if e["name"] == "MEMCLUSTER_ARCHIVE__DSN"]
        assert dsn == [{"name": "MEMCLUSTER_ARCHIVE__DSN", "valueFrom": {"secretKeyRef": {
            "name": "memcluster-postgres", "key": "dsn"}}}], where
    ft = rs["spec"]["rayClusterConfig"]["gcsFaultToleranceOptions"]
    assert ft["redisAddress"] == "redis:6379"
    assert ft["redisPassword"]["valueFrom"]["secretKeyRef"] == {"name": "redis-password", "key": "password"}
    secrets = {s["metadata"]["name"]: s["stringData"] for s in of_kind(docs_of(SECRETS), "Secret")}
    assert urlparse(secrets["memcluster-postgres"]["dsn"]).hostname == "postgres"
    assert secrets["memcluster-postgres"]["password"] in secrets["memcluster-postgres"]["dsn"]


def test_services_and_policies_select_existing_pods() -> None:
    docs = resources()
    labels = pod_labels(docs)
    for svc in of_kind(docs, "Service"):
        sel = svc["spec"]["selector"]
        assert any(selects(sel, lab) for lab in labels), f"Service {svc['metadata']['name']} selects no pod"
        ports = {p["containerPort"] for d in docs for _, tpl in pod_templates(d)
                 if selects(sel, (tpl.get("metadata") or {}).get("labels") or {})
                 for c in tpl["spec"]["containers"] for p in c.get("ports") or []}
        for p in svc["spec"]["ports"]:
            assert p.get("targetPort", p["port"]) in ports, f"Service {svc['metadata']['name']} port {p}"
    for kind in ("NetworkPolicy", "PodDisruptionBudget"):
        for d in of_kind(docs, kind):
            sel = d["spec"]["podSelector" if kind == "NetworkPolicy" else "selector"]["matchLabels"]
            assert any(selects(sel, lab) for lab in labels), f"{kind} {d['metadata']['name']} selects no pod"
    for pol in of_kind(docs, "NetworkPolicy"):
        for rule in pol["spec"].get("ingress") or []:
            for peer in rule.get("from") or []:
                sel = (peer.get("podSelector") or {}).get("matchLabels") or {}
                assert any(selects(sel, lab) for lab in labels), f"NetworkPolicy peer {sel} selects no pod"


# ---------------------------------------------------------------------------- secrets, containers
def test_referenced_secrets_and_config_maps_exist() -> None:
    docs = resources()
    templates = {s["metadata"]["name"]: set(s.get("stringData") or s.get("data") or {})
                 for s in of_kind(docs_of(SECRETS), "Secret")}
    assert set(templates) == SECRET_NAMES
    refs = [v for k, v in walk(docs) if k == "secretKeyRef"]
    assert refs
    for ref in refs:
        assert ref["name"] in templates, f"Secret {ref['name']} has no template in {SECRETS.name}"
        assert ref["key"] in templates[ref["name"]], f"Secret {ref['name']} has no key {ref['key']}"
    config_maps = {c["metadata"]["name"] for c in of_kind(docs, "ConfigMap")}
    for ref in (v for k, v in walk(docs) if k == "configMapRef"):
        assert ref["name"] in config_maps
    local = docs_of(OVERLAYS["local"] / "kustomization.yaml")[0]
    generated = {g["name"]: {lit.split("=", 1)[0] for lit in g["literals"]} for g in local["secretGenerator"]}
    assert generated == templates, "the local overlay generates the same Secrets and keys"
    assert local["generatorOptions"]["disableNameSuffixHash"] is True
    api_keys = next(lit for lit in local["secretGenerator"][0]["literals"] if lit.startswith("MEMCLUSTER_API_KEYS="))
    Settings.model_validate({"api_keys": yaml.safe_load(api_keys.split("=", 1)[1])})


def test_no_secret_values_in_applied_manifests() -> None:
    """Secrets reach clusters only from the template (filled by hand) or the local generator."""
    for p in yaml_files():
        if p == SECRETS:
            continue
        assert not of_kind(resources([p]), "Secret"), f"{p} holds a Secret"


def test_every_container_has_requests_and_limits() -> None:
    found = list(containers(resources()))
    assert len(found) >= 6
    for where, c in found:
        res = c.get("resources") or {}
        for part in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(res.get(part) or {}), f"{where}: resources.{part} needs cpu and memory"
    auto = rayservice()["spec"]["rayClusterConfig"]["autoscalerOptions"]["resources"]
    assert {"cpu", "memory"} <= set(auto["requests"]) and {"cpu", "memory"} <= set(auto["limits"])


def test_images_are_pinned() -> None:
    images = [v for p in yaml_files() for k, v in walk(docs_of(p)) if k == "image" and isinstance(v, str)]
    assert images
    for image in images:
        name, _, digest = image.partition("@")
        tag = name.rsplit("/", 1)[-1].partition(":")[2]
        assert digest or (tag and tag != "latest"), f"image {image} is not pinned"
    dockerfile = (K8S / "Dockerfile").read_text(encoding="utf-8")
    assert re.search(r"^FROM python:3\.11-slim$", dockerfile, re.M)
    assert f"ray[default]=={ray_pin()}" in dockerfile and "torch==2.13.0" in dockerfile


def test_the_image_sets_the_serve_process_environment_memctl_sets() -> None:
    from cluster.deploy import SERVE_PROCESS_ENV

    dockerfile = (K8S / "Dockerfile").read_text(encoding="utf-8")
    for name, value in SERVE_PROCESS_ENV.items():
        assert re.search(rf"^\s*(ENV\s+)?{name}={re.escape(value)}\b", dockerfile, re.M), f"{name}={value}"


def test_ray_pods_run_serves_haproxy_ingress_as_memctl_does() -> None:
    """The manifests follow ``http.ingress: auto``: every Ray container takes the memcluster-env ConfigMap,
    which turns on Serve's HAProxy mode with the value ``memctl up`` sets, and every image that can carry a
    Ray node has the ``haproxy`` extra (Serve starts an HAProxy on each node)."""
    from cluster.deploy import HAPROXY_MODE_ENV

    env = of_kind(docs_of(K8S / "base" / "memcluster-env.yaml"), "ConfigMap")[0]["data"]
    assert HAPROXY_MODE_ENV and all(env.get(name) == value for name, value in HAPROXY_MODE_ENV.items())
    refs = [c.get("envFrom") for _, c in containers([rayservice()])]
    assert refs and all({"configMapRef": {"name": "memcluster-env"}} in (r or []) for r in refs)
    extras = re.search(r"^all = \[\"memcluster\[([a-z0-9,]+)\]\"\]", (ROOT / "pyproject.toml").read_text(), re.M)
    assert extras and "haproxy" in extras.group(1).split(",")
    dockerfile = (K8S / "Dockerfile").read_text(encoding="utf-8")
    assert re.search(r"^ARG EXTRAS=all$", dockerfile, re.M)
    assert all("haproxy" in m.split(",") for m in re.findall(r"--build-arg EXTRAS=([a-z0-9,]+)", dockerfile))


# ------------------------------------------------------------------------- built overlays (kubectl)
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (with its kustomize) is not installed")
@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_overlay_builds(overlay: str) -> None:
    out = subprocess.run(["kubectl", "kustomize", str(OVERLAYS[overlay])], capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert all(d["metadata"].get("namespace") == "memcluster" for d in docs if d["kind"] != "Namespace")
    rs = one(docs, "RayService")
    target = k8s_config.TARGETS["local" if overlay == "local" else "base"]
    assert rs["spec"]["serveConfigV2"] == k8s_config.render_target(target)
    for where, c in containers(docs):
        assert c.get("image"), f"{where}: the overlay lost the image"
        assert c["resources"]["requests"] and c["resources"]["limits"], where
    groups = rs["spec"]["rayClusterConfig"].get("workerGroupSpecs") or []
    ss = next(d for d in of_kind(docs, "StatefulSet") if d["metadata"]["name"] == "qdrant")
    assert {d["metadata"]["name"] for d in of_kind(docs, "StatefulSet")} == {"qdrant", "postgres", "redis"}
    if overlay == "local":
        assert groups == [] and ss["spec"]["replicas"] == 1
        assert {s["metadata"]["name"] for s in of_kind(docs, "Secret")} == SECRET_NAMES
        head = rs["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0]
        assert head["env"] and head["envFrom"], "the local head keeps its settings"
    else:
        assert {g["groupName"] for g in groups} == {"cpu", "gpu"} and ss["spec"]["replicas"] == 3
        assert not of_kind(docs, "Secret"), "production Secrets are created by hand"
