"""`groupcoord-pipeline`: the analytics job and its report from the command line.

    groupcoord-pipeline analytics --bootstrap-server HOST:PORT --output DIR [--once]
    groupcoord-pipeline report --output DIR --group GROUP --png FILE

`analytics` runs the job (analytics.py) once (availableNow: what the log holds now, then
exit) or continuously (a micro-batch every --interval, until interrupted); its checkpoint is
under DIR unless --checkpoint says otherwise, so running it again resumes where it stopped.
Spark gets the Kafka connector from --jars (local jars) or else --packages (Maven
coordinates, resolved by Spark; default: the connector of the installed pyspark). Run
inside a process that already has a SparkSession, it uses that one.
`report` draws a group's lag and rebalances into a PNG (report.py); it needs no Spark.
Exit status: 0 done, 1 failed (the reason on stderr), 2 bad arguments.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="groupcoord-pipeline", description="groupcoord's analytics job on Spark."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    job = commands.add_parser("analytics", help="run the analytics job over __consumer_offsets")
    job.add_argument("--bootstrap-server", required=True, help="HOST:PORT of the server")
    job.add_argument("--output", required=True, type=Path, help="where the tables go")
    job.add_argument(
        "--checkpoint", type=Path, help="the query's checkpoint (default: under --output)"
    )
    mode = job.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true", help="process what the log holds, then exit")
    mode.add_argument("--interval", default="10 seconds", help="micro-batch interval (continuous)")
    job.add_argument("--jars", help="comma-separated jars of the Kafka connector")
    job.add_argument("--packages", help="Maven coordinates of the Kafka connector")
    job.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    report = commands.add_parser("report", help="draw a group's lag and rebalances as a PNG")
    report.add_argument("--output", required=True, type=Path, help="the job's --output")
    report.add_argument("--group", required=True)
    report.add_argument("--png", required=True, type=Path)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "report":
            from .report import draw_report

            print(draw_report(args.output, args.group, args.png))
            return 0
        return _analytics(args)
    except KeyboardInterrupt:
        return 0
    except Exception as exc:  # one line for the user, not a traceback
        print(f"groupcoord-pipeline {args.command}: {exc}", file=sys.stderr)
        return 1


def _analytics(args: argparse.Namespace) -> int:
    from pyspark.sql import SparkSession

    from .analytics import start_analytics

    spark = SparkSession.getActiveSession()
    owned = spark is None
    if spark is None:
        spark = _session(args)
    try:
        query = start_analytics(
            spark,
            args.bootstrap_server,
            args.output,
            once=args.once,
            interval=args.interval,
            checkpoint=args.checkpoint,
        )
        try:
            query.awaitTermination()
        finally:
            # Waits for the query's thread to end and deregister it: a next run on the same
            # checkpoint in this session would otherwise find it still active.
            query.stop()
        failure = query.exception()
        if failure is not None:
            raise RuntimeError(str(failure))
        return 0
    finally:
        if owned:
            spark.stop()


def _session(args: argparse.Namespace) -> Any:
    import pyspark
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(args.master).appName("groupcoord-analytics")
    if args.jars:
        builder = builder.config("spark.jars", args.jars)
    else:
        connector = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"
        builder = builder.config("spark.jars.packages", args.packages or connector)
    return builder.config("spark.sql.session.timeZone", "UTC").getOrCreate()


if __name__ == "__main__":
    sys.exit(main())
