"""The `groupcoord` command line: `serve` runs the server; `groups` and `topics` are admin
commands that speak the Kafka protocol to any server (ours or Apache Kafka) through a small
client on the project's codec (kafka_client.py)."""

from __future__ import annotations

import argparse
import sys
from importlib import metadata

from . import group_commands, serve, topic_commands
from .kafka_client import AdminClient, ConnectionFailed, KafkaError
from .output import EXIT_CODES_HELP, Exit, error

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"  # the listener's default

SHORT_HELP = """\
usage: groupcoord COMMAND ...

  serve                       run the server (groupcoord serve --help: every setting)
  groups list                 groups, with --state / --type filters
  groups describe GROUP       members, committed offsets and lag
  groups timeline GROUP       why the group rebalanced (groupcoord servers only)
  groups reset-offsets GROUP  --to-earliest/--to-latest/...; dry run unless --execute
  groups delete GROUP...      groups delete-offsets GROUP --topic T
  topics list|describe|create|delete|alter-config

  --bootstrap-server HOST:PORT (default 127.0.0.1:9092), --json for scripts,
  --version, -h/--help on any command.
"""


def version() -> str:
    try:
        return metadata.version("groupcoord")
    except metadata.PackageNotFoundError:
        return "unknown"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        """Usage errors exit 2, as argparse's, naming the command."""
        self.print_usage(sys.stderr)
        self.exit(Exit.USAGE, f"{self.prog}: error: {message}\n")


def parser() -> argparse.ArgumentParser:
    top = _Parser(
        prog="groupcoord",
        description="Kafka-protocol server (group coordinator and durable single-node data "
        "plane), and admin commands for any Kafka-protocol server.",
        epilog=EXIT_CODES_HELP,
    )
    top.add_argument("--version", action="version", version=f"groupcoord {version()}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT",
        default=DEFAULT_BOOTSTRAP,
        help=f"the server to talk to (default {DEFAULT_BOOTSTRAP})",
    )
    common.add_argument("--json", action="store_true", help="JSON output, for scripts")
    common.add_argument(
        "--timeout", type=float, default=30.0, metavar="SECONDS", help="per request (30)"
    )
    sub = top.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    serve.add_parser(sub)
    group_commands.add_parser(sub, common)
    topic_commands.add_parser(sub, common)
    return top


def main(argv: list[str] | None = None) -> int:
    args_list = sys.argv[1:] if argv is None else argv
    if not args_list:
        sys.stdout.write(SHORT_HELP)
        return Exit.OK
    top = parser()
    args = top.parse_args(args_list)
    args.argv = args_list  # serve --workers starts each worker with the same arguments
    run = getattr(args, "run", None)
    if run is None:
        top.print_help()
        return Exit.USAGE
    uses = getattr(args, "uses", None)
    if uses is None:  # serve, or help for a command without its subcommand
        return int(run(args, top))
    if uses == "http":
        return int(run(args, None))
    try:
        with AdminClient(args.bootstrap_server, args.timeout) as client:
            return int(run(args, client))
    except KafkaError as e:
        error(str(e))
        return Exit.KAFKA_ERROR
    except ConnectionFailed as e:
        error(str(e))
        return Exit.UNREACHABLE
    except ValueError as e:  # arguments that only the server's answers show to be bad
        error(str(e))
        return Exit.USAGE


if __name__ == "__main__":
    sys.exit(main())
