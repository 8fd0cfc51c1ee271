"""Every conformance sequence, registered in runner.SEQUENCES on import (one module per area)."""

from tests.conformance.sequences import (  # noqa: F401
    admin,
    classic,
    consumer,
    data,
    delete_records,
    offsets,
    static,
    txn,
)
