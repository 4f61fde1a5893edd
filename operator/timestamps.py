"""Times as the operator writes them in status and conditions: RFC 3339 in UTC, to the
second, as Kubernetes writes its own."""

from __future__ import annotations

import datetime

UTC_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def utc_now() -> str:
    return utc_stamp(datetime.datetime.now(datetime.UTC))


def utc_stamp(moment: datetime.datetime) -> str:
    return moment.strftime(UTC_FORMAT)


def parse_utc(stamp: str) -> datetime.datetime:
    return datetime.datetime.strptime(stamp, UTC_FORMAT).replace(tzinfo=datetime.UTC)
