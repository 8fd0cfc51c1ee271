"""`groupcoord serve [flags]`: run the server."""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from typing import Any

from ..config import ENV_PREFIX, Config, ConfigError, load_config


def settings_epilog() -> str:
    settings = "\n".join(
        f"  {f.name:<36} {ENV_PREFIX}{f.name.upper():<36} default {f.default!r}\n"
        f"  {'':<36} {f.metadata.get('help', '')}"
        for f in fields(Config)
    )
    return (
        "Every setting can come from a TOML file (--config), from an environment variable\n"
        f"{ENV_PREFIX}<NAME>, or from a flag; flags win over the environment, which wins over\n"
        "the file.\n\nSettings (TOML key, environment variable, default):\n" + settings
    )


def add_parser(sub: Any) -> argparse.ArgumentParser:
    serve: argparse.ArgumentParser = sub.add_parser(
        "serve",
        help="run the server",
        description="Run the server.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=settings_epilog(),
    )
    serve.add_argument("--config", metavar="FILE", help="TOML file with settings")
    serve.add_argument("--listen", metavar="HOST:PORT", help="Kafka listener (127.0.0.1:9092)")
    serve.add_argument(
        "--advertised-listener", metavar="HOST:PORT", help="address advertised to clients"
    )
    serve.add_argument("--data-dir", metavar="DIR", help="data directory (./data)")
    serve.add_argument(
        "--metrics-listen",
        metavar="HOST:PORT",
        help="metrics/health HTTP listener (127.0.0.1:9464)",
    )
    serve.add_argument(
        "--workers",
        metavar="N",
        help="worker processes, each a broker node owning a share of the groups and partitions (1)",
    )
    serve.add_argument(
        "--cluster",
        metavar="DSN",
        help="PostgreSQL DSN (postgresql://...) of a cluster of nodes sharing one database",
    )
    serve.add_argument("--node-id", metavar="N", help="this node's broker id (0)")
    serve.add_argument(
        "--set",
        metavar="NAME=VALUE",
        action="append",
        default=[],
        help="any other setting, e.g. --set auto_create_topics=false",
    )
    serve.set_defaults(run=run)
    return serve


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    overrides: dict[str, object] = {
        "listen": args.listen,
        "advertised_listener": args.advertised_listener,
        "data_dir": args.data_dir,
        "metrics_listen": args.metrics_listen,
        "workers": args.workers,
        "cluster": args.cluster,
        "node_id": args.node_id,
    }
    known = {f.name for f in fields(Config)}
    for item in args.set:
        name, sep, value = item.partition("=")
        name = name.replace("-", "_")
        if not sep or name not in known:
            parser.error(f"--set expects NAME=VALUE with a known setting, got {item!r}")
        overrides[name] = value
    try:
        config = load_config(args.config, overrides)
    except ConfigError as e:
        print(f"groupcoord: {e}", file=sys.stderr)
        return 2
    if config.workers > 1 and config.worker_index < 0:
        from ..server.supervisor import run as supervise

        return supervise(config, list(getattr(args, "argv", sys.argv[1:])))
    from ..server.app import run as run_server

    try:
        if config.worker_index >= 0:  # one of `serve --workers N`'s processes
            from ..server.worker_layout import worker_config

            config = worker_config(config, config.worker_index)
        return run_server(config)
    except ConfigError as e:  # found while starting: e.g. an assignor that is not installed
        print(f"groupcoord: {e}", file=sys.stderr)
        return 2
