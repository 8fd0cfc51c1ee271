"""The context the group coordinator's handlers take: topics/context.py's HandlerContext,
whose door into the group coordinator is the gateway."""

from __future__ import annotations

from ..runtime.gateway import GroupCoordinatorGateway
from ..topics.context import HandlerContext

GroupContext = HandlerContext[GroupCoordinatorGateway]
