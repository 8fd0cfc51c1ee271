from tests.jvm.kafka_broker import reference_kafka  # noqa: F401  (the module-scoped fixture)
