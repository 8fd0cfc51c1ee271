"""groupcoord's data pipeline on Spark through PySpark (install with the `spark` extra:
`pip install 'groupcoord[spark]'`). It talks to the server only through the Kafka protocol,
like any user's job, so it works against any Kafka broker.

- `offset_committer.KafkaOffsetCommitter`: a StreamingQueryListener committing each
  micro-batch's end offsets to a consumer group, so Spark jobs show up in lag tools.
- `analytics.start_analytics`: the analytics job, a streaming query over
  `__consumer_offsets` keeping Parquet tables offset_commits, group_events and lag
  (decoded by coordinator_log.py, the timeline by group_timeline.py, lag by lag_probe.py).
- `report.draw_report`: a group's lag and rebalances as a PNG.
- `cli`: the `groupcoord-pipeline` command (analytics, report).
"""
