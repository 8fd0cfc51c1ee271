"""groupcoord's data pipeline on Spark through PySpark (install with the `spark` extra:
`pip install 'groupcoord[spark]'`). It talks to the server only through the Kafka protocol,
like any user's job, so it works against any Kafka broker.

- `offset_committer.KafkaOffsetCommitter`: a StreamingQueryListener committing each
  micro-batch's end offsets to a consumer group, so Spark jobs show up in lag tools.
"""
