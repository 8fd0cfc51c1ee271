"""Every conformance sequence, registered in runner.SEQUENCES on import (one module per area)."""

from tests.conformance.sequences import admin, classic, consumer, data, offsets, static  # noqa: F401
