"""The transaction coordinator's pure logic (Kafka's TransactionCoordinator and
TransactionMetadata): one TxnShard per `__transaction_state` partition, no asyncio, clock or
I/O; time comes in as `now_ms`, producer ids from an injected allocator."""
