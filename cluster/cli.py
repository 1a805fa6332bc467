"""memctl: run memcluster on this machine.

  memctl up [--data-dir DIR] [--port 8000] [--host 127.0.0.1] [--config configs/serve.local.yaml]
            [--ray-port 6390] [--temp-dir DIR]
  memctl status
  memctl down
  memctl k8s-config [--config configs/serve.production.yaml] [--check | --write]
  memctl export --app APP --out FILE [--url URL] [--api-key KEY]     (or MEMCLUSTER_URL / MEMCLUSTER_API_KEY)
  memctl import --app APP --in FILE [--url URL] [--api-key KEY]
  memctl backfill (--input PATH_OR_URI ... | --locomo FILE --app APP) [--format jsonl|parquet] [--concurrency N]
  memctl reextract [--apps A ...] [--users U ...] [--policy P] [--extractor-base-url URL] [--model M]
                   [--granularity G] [--concurrency N] | --drop-generation N | --list
  memctl mcp --app APP --user USER [--url URL]                      (stdio MCP server; key: MEMCLUSTER_API_KEY)
  memctl forget --app APP --user USER [--url URL] [--api-key KEY]    erase a user (then `memctl compact`)
  memctl compact [--url URL] [--api-key KEY]                         compact the stores (deleted text leaves disk)
  memctl reshard --shards M [--data-dir DIR] [--config ...] [--settings FILE]   change the shard count (offline)

``up`` starts a local Ray head on loopback, deploys the Serve apps of the config with embedded
defaults, waits until ``/readyz`` answers and prints the base URL. ``down`` stops what ``up``
started and nothing else (every process of its Ray head: they carry a tag in their environment, see
:mod:`cluster.ray_head`); the data directory is kept. memctl keeps its state and Ray's auth token
in ``~/.memcluster`` (``MEMCTL_STATE`` moves the state file, and the token beside it; see
:mod:`cluster.ray_auth`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from cluster import deploy, ray_auth, ray_head, serve_teardown
from cluster.backup import URL_HELP
from cluster.status_summary import summarize
from memcore.data_root import check_shard_count
from memcore.errors import MemoryServiceError
from memcore.settings import Settings
from memcore.vocabulary import DEFAULT_PORT

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "serve.local.yaml"
NOT_RUNNING = deploy.NOT_RUNNING


def state_file() -> Path:
    """memctl's state file (``$MEMCTL_STATE``, default ``~/.memcluster/memctl.json``), read when used."""
    return Path(os.environ.get("MEMCTL_STATE", "~/.memcluster/memctl.json")).expanduser()


def _ray_env(settings: Settings) -> dict[str, str]:
    return {**deploy.serve_process_env(settings), **os.environ, "RAY_USAGE_STATS_ENABLED": "0"}


def _set_ray_auth() -> ray_auth.RayAuth:
    """Token auth for the local head and every client of it (:mod:`cluster.ray_auth`)."""
    return ray_auth.ensure(state_file().parent)


def _already_up() -> str | None:
    """The base URL of a memcluster this memctl home runs, or None; a state file whose service no longer
    answers is stale: what is left of it is stopped and the file removed."""
    state = _state()
    if state is None:
        return None
    ready = deploy.readyz(state["base_url"], timeout=2.0)
    if ready is not None:
        return str(state["base_url"])
    print(f"a previous memcluster ({state['base_url']}) no longer answers; cleaning up after it", flush=True)
    _stop(state)
    return None


def cmd_up(args: argparse.Namespace) -> int:
    plan = deploy.load_plan(Path(args.config), args.settings, data_dir=args.data_dir, host=args.host,
                            port=args.port, shards=args.shards)
    settings = deploy.with_ingress(plan.settings)  # `auto` resolved once: it runs `haproxy -v`
    running = _already_up()
    if running is not None:
        print(f"memcluster is already running at {running}: `memctl down` stops it")
        return 0
    try:
        check_shard_count(settings)  # before Ray starts: the data directory's N (memctl reshard changes it)
    except MemoryServiceError as exc:
        print(f"memctl up: {exc.message}", file=sys.stderr)
        return 1
    if deploy.port_in_use(plan.host, plan.port):
        print(f"port {plan.port} on {plan.host} is already in use: stop what listens there or choose another "
              "with --port", file=sys.stderr)
        return 1
    if busy := deploy.haproxy_port_in_use(settings):
        print(f"port {busy[1]} on {plan.host} (http.haproxy.{busy[0]}, HAProxy's own) is already in use: stop "
              f"what listens there or set MEMCLUSTER_HTTP__HAPROXY__{busy[0].upper()}", file=sys.stderr)
        return 1
    try:
        head = ray_head.start(args.ray_port, _ray_env(settings), state_file().parent / "ray-start.log",
                              num_cpus=args.num_cpus, temp_dir=Path(args.temp_dir) if args.temp_dir else None)
    except ray_head.RayStartError as exc:
        print(f"memctl up: {exc}", file=sys.stderr)
        return 1
    state = {**head.to_state(), "base_url": deploy.service_url(plan), "data_dir": str(settings.data_dir),
             "namespace": settings.namespace, "ingress": deploy.ingress_of(settings),
             "config": str(Path(args.config).resolve()),
             "settings_file": str(Path(args.settings).resolve()) if args.settings else None,
             "shards": settings.shards}
    _write_state(state)  # before the deploy: `down` finds the head also when `up` is stopped meanwhile
    try:
        base_url = deploy.apply(plan, head.gcs)
    except BaseException:
        stopped, _ = _stop(state)
        print(f"deploy failed; stopped {stopped} processes of the Ray head it started", file=sys.stderr)
        raise
    print("waiting for", f"{base_url}/readyz", flush=True)
    if not deploy.wait_ready(base_url, timeout=args.timeout):
        print(f"memcluster did not become ready within {args.timeout}s", file=sys.stderr)
        return 1
    print(f"memcluster is up: {base_url}  (data in {settings.data_dir})")
    if args.foreground:
        print("press Ctrl-C to stop", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            return cmd_down(args)
    return 0


def _state() -> dict[str, Any] | None:
    path = state_file()
    if not path.exists():
        return None
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except ValueError:
        return None
    return data


def cmd_status(args: argparse.Namespace) -> int:
    state = _state()
    if state is None:
        print(NOT_RUNNING)
        return 1
    ready = deploy.readyz(state["base_url"])
    print(json.dumps({"base_url": state["base_url"], "data_dir": state["data_dir"],
                      "ingress": state.get("ingress", "proxy"), "ray_auth": args.ray_auth.describe(),
                      "operations": summarize(ready), "readyz": ready}, indent=2))
    return 0 if ready and ready.get("status") == "ready" else 1


def _write_state(state: dict[str, Any]) -> None:
    path = state_file()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.write_text(json.dumps(state))


def _stop(state: dict[str, Any]) -> tuple[int, bool]:
    """Stop what ``up`` started: the Serve apps and shard actors (bounded, and only while its head runs),
    then every process of that head and no other (:mod:`cluster.ray_head`); remove the state file.
    Returns how many processes were stopped and whether the head was still running."""
    head = ray_head.Head.from_state(state)
    alive = head is None or head.alive()
    if alive:
        serve_teardown.run(state["gcs"], state.get("namespace", "memcluster"))
    stopped = ray_head.stop(head) if head is not None else 0
    state_file().unlink(missing_ok=True)
    return stopped, alive


def cmd_down(args: argparse.Namespace) -> int:
    state = _state()
    if state is None:
        print(NOT_RUNNING.replace("start it", "nothing to stop; start it"))
        return 0
    stopped, alive = _stop(state)
    if alive:
        print(f"stopped {stopped} processes of the Ray head memctl started")
    else:
        print(f"the Ray head memctl started had stopped already; stopped {stopped} processes left of it")
    print(f"memcluster stopped; data kept in {state['data_dir']}")
    return 0


def cmd_k8s_config(args: argparse.Namespace) -> int:
    """Print the RayService serveConfigV2 rendered from a Serve config, or check/rewrite the manifests."""
    from cluster import k8s_config

    if args.check:
        stale = k8s_config.drift()
        for name in stale:
            print(f"{k8s_config.TARGETS[name].manifest}: serveConfigV2 differs from its rendering; "
                  "run `memctl k8s-config --write`", file=sys.stderr)
        return 1 if stale else 0
    if args.write:
        for path in k8s_config.write():
            print(f"rewrote {path}")
        return 0
    config = Path(args.config) if args.config else k8s_config.PRODUCTION_CONFIG
    llm = None if args.no_llm else Path(args.llm_config) if args.llm_config else k8s_config.LLM_CONFIG
    overrides = Path(args.overrides) if args.overrides else None
    print(k8s_config.dump(k8s_config.render(config, llm_config=llm, overrides=overrides)), end="")
    return 0


# ---------------------------------------------------------------- backups (export / import)
def cmd_export(args: argparse.Namespace) -> int:
    """Write one app's memories as JSONL (see :mod:`cluster.backup`)."""
    from cluster import backup

    try:
        lines, users = backup.export_app(backup.base_url(args.url, _state()), backup.api_key(args.api_key),
                                         args.app, args.out)
    except httpx.ConnectError:
        print(f"memctl export: nothing answers at {backup.base_url(args.url, _state())}: {NOT_RUNNING} "
              "(or pass --url)", file=sys.stderr)
        return 1
    except (backup.BackupError, httpx.HTTPError, OSError) as exc:
        print(f"memctl export: {exc}", file=sys.stderr)
        return 1
    where = "stdout" if args.out == "-" else args.out
    print(f"exported {lines} entries of {users} users of app {args.app!r} to {where}", file=sys.stderr)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    """Restore one app's memories from a JSONL export (see :mod:`cluster.backup`)."""
    from cluster import backup

    try:
        counts = backup.import_app(backup.base_url(args.url, _state()), backup.api_key(args.api_key),
                                   args.app, args.in_file, chunk_bytes=args.chunk_bytes)
    except httpx.ConnectError:
        print(f"memctl import: nothing answers at {backup.base_url(args.url, _state())}: {NOT_RUNNING} "
              "(or pass --url)", file=sys.stderr)
        return 1
    except (backup.BackupError, httpx.HTTPError, OSError) as exc:
        print(f"memctl import: {exc}", file=sys.stderr)
        return 1
    print(f"imported {counts['entries']} entries of {counts['users']} users into app {args.app!r} "
          f"({counts['active']} active, {counts['deleted']} deleted)", file=sys.stderr)
    return 0


def _add_backup_parsers(sub: Any) -> None:
    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--app", required=True, help="the app whose memories to back up / restore")
        p.add_argument("--url", default=None, help=URL_HELP)
        p.add_argument("--api-key", default=None, help="the app's API key (default $MEMCLUSTER_API_KEY; "
                                                       "prefer the environment)")

    exp = sub.add_parser("export", help="write one app's memories as JSONL (tombstones included)")
    common(exp)
    exp.add_argument("--out", required=True, help="output file ('-': stdout); written atomically")
    exp.set_defaults(func=cmd_export)
    imp = sub.add_parser("import", help="restore one app's memories from a JSONL export")
    common(imp)
    imp.add_argument("--in", dest="in_file", required=True, help="the JSONL export ('-': stdin)")
    imp.add_argument("--chunk-bytes", type=int, default=16 * 1024 * 1024,
                     help="largest request body (the server's http.max_import_bytes bounds it)")
    imp.set_defaults(func=cmd_import)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="memctl", description="Run memcluster locally.")
    sub = p.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start a local Ray head and deploy memcluster")
    up.add_argument("--data-dir", default=None, help="where shards keep their stores (default ~/.memcluster/data)")
    up.add_argument("--port", type=int, default=None, help=f"HTTP port (default {DEFAULT_PORT})")
    up.add_argument("--host", default=None, help="HTTP host (default 127.0.0.1; other hosts need API keys)")
    up.add_argument("--shards", type=int, default=None)
    up.add_argument("--config", default=str(DEFAULT_CONFIG), help="Serve config YAML")
    up.add_argument("--settings", default=None, help="memcluster settings YAML (MEMCLUSTER_* env overrides it)")
    up.add_argument("--ray-port", type=int, default=6390, help="the Ray head's GCS port (default 6390)")
    up.add_argument("--temp-dir", default=None, help="Ray's temp dir for the head (default Ray's: "
                    "$RAY_TMPDIR/ray, else $TMPDIR/ray, else /tmp/ray); short: Ray's socket paths live under it")
    up.add_argument("--num-cpus", type=int, default=None)
    up.add_argument("--timeout", type=float, default=300.0)
    up.add_argument("--foreground", action="store_true", help="stay attached; Ctrl-C runs `memctl down`")
    up.set_defaults(func=cmd_up)
    st = sub.add_parser("status", help="show readiness and shards")
    st.set_defaults(func=cmd_status)
    down = sub.add_parser("down", help="stop what `up` started (data is kept)")
    down.set_defaults(func=cmd_down)
    k8s = sub.add_parser("k8s-config", help="print the KubeRay serveConfigV2 rendered from a Serve config")
    k8s.add_argument("--config", default=None, help="Serve config YAML (default configs/serve.production.yaml)")
    k8s.add_argument("--llm-config", default=None, help="extractor app config (default configs/llm.production.yaml)")
    k8s.add_argument("--no-llm", action="store_true", help="leave the vLLM extractor app out")
    k8s.add_argument("--overrides", default=None, help="per-app overrides YAML (as an overlay uses)")
    mode = k8s.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 when a k8s manifest drifted from its rendering")
    mode.add_argument("--write", action="store_true", help="rewrite the serveConfigV2 blocks of the k8s manifests")
    k8s.set_defaults(func=cmd_k8s_config)
    _add_backup_parsers(sub)
    from cluster import jobs_cli  # backfill, reextract (Ray Data jobs)

    jobs_cli.add_parsers(sub, _state, DEFAULT_CONFIG)
    from cluster import mcp_cli  # mcp (stdio MCP server)

    mcp_cli.add_parsers(sub, _state)
    from cluster import erasure_cli  # forget, compact

    erasure_cli.add_parsers(sub, _state)
    from cluster import reshard_cli  # reshard (offline)

    reshard_cli.add_parsers(sub, _state, DEFAULT_CONFIG)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    args.ray_auth = _set_ray_auth()
    try:
        return int(args.func(args))
    except (ValueError, subprocess.CalledProcessError) as exc:
        print(f"memctl: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
