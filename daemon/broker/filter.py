"""Subscriptions and broker-side TAG filtering (docs/wire-protocol.md §tags-and-filtering).

The broker filters coarsely on the consume queue's tags code; clients re-check the tag string.
"""

from __future__ import annotations

from daemon.broker.bodies import SubscriptionData
from store.javahash import java_hash

SUB_ALL = "*"
TAG = "TAG"


def build_subscription(
    topic: str, expression: str | None, expression_type: str | None = None
) -> SubscriptionData:
    """Parse a tag expression as `FilterAPI.buildSubscriptionData` does: `*`, or `a || b`."""
    kind = expression_type or TAG
    if kind != TAG:
        return SubscriptionData(topic, expression or "", expression_type=kind)
    if not expression or expression.strip() == SUB_ALL:
        return SubscriptionData(topic, SUB_ALL, expression_type=TAG)
    tags = [t.strip() for t in expression.split("||") if t.strip()]
    return SubscriptionData(
        topic, expression, tags_set=tags, code_set=[java_hash(t) for t in tags], expression_type=TAG
    )


def tag_codes(sub: SubscriptionData) -> frozenset[int] | None:
    """The tags codes a subscription accepts, as the store's pull filter wants them (None = all)."""
    if sub.sub_string == SUB_ALL or (not sub.tags_set and not sub.code_set):
        return None
    return frozenset(int(c) for c in sub.code_set)


def is_tag_type(expression_type: str | None) -> bool:
    return not expression_type or expression_type == TAG
