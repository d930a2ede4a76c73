"""Retention on the broker: the wire form of a cleanup plan (the store side: `store.api.MessageStore`).

The clean service itself runs inside the store (:class:`store.cleanup.Cleaner`, every
``cleanResourceInterval``); the broker serves three requests around it:

* ``DELETE_EXPIRED_COMMITLOG`` (329): the next 20 runs delete expired files whatever the hour
  (docs/store-format.md §manual-deletion).
* ``CLEAN_EXPIRED_CONSUMEQUEUE`` (306): destroy queues whose every message is gone.
* :data:`CLEAN_PLAN`, an mqctl extension: the plan a manual trigger would apply now (files, ages, why
  each goes, whose unconsumed messages go with it), computed by the same function as the service and
  ``mqctl store clean``. A RocketMQ broker answers ``REQUEST_CODE_NOT_SUPPORTED`` to it, and a dry run
  must never be sent as 329, which a RocketMQ broker would act on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from store.cleanup import CleanPlan

#: Request code of the plan (dry run) request; far from RocketMQ's 4.x/5.x code ranges.
CLEAN_PLAN = 65329
#: mqctl's GET_BROKER_RUNTIME_INFO key, present while the store refuses puts: why (a full disk, files
#: that cannot be written, a refusal such as OS_PAGECACHE_BUSY). ``check disk|cluster`` make it CRITICAL.
WRITE_REFUSED_RUNTIME_KEY = "storeWriteRefused"


@dataclass(frozen=True, slots=True)
class PlanFile:
    """One CommitLog file of a plan as it travels (JSON, camelCase keys)."""

    name: str
    from_offset: int
    size: int
    mtime_ms: int
    age_ms: int
    expired: bool
    reason: str | None
    unconsumed: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PlanBody:
    """The :data:`CLEAN_PLAN` response body."""

    disk_ratio: float
    delete: bool
    forcibly: bool
    disk_full: bool
    file_reserved_time: int
    watermark: int
    force_watermark: int
    files: list[PlanFile]

    def dumps(self) -> bytes:
        return json.dumps(
            {
                "diskRatio": self.disk_ratio,
                "delete": self.delete,
                "forcibly": self.forcibly,
                "diskFull": self.disk_full,
                "fileReservedTime": self.file_reserved_time,
                "diskMaxUsedSpaceRatio": self.watermark,
                "diskSpaceCleanForciblyRatio": self.force_watermark,
                "files": [
                    {
                        "name": f.name,
                        "fromOffset": f.from_offset,
                        "size": f.size,
                        "mtime": f.mtime_ms,
                        "ageMs": f.age_ms,
                        "expired": f.expired,
                        "reason": f.reason,
                        "unconsumed": f.unconsumed,
                    }
                    for f in self.files
                ],
            }
        ).encode()

    @classmethod
    def loads(cls, body: bytes) -> PlanBody:
        d: dict[str, Any] = json.loads(body)
        return cls(
            float(d["diskRatio"]),
            bool(d["delete"]),
            bool(d["forcibly"]),
            bool(d["diskFull"]),
            int(d["fileReservedTime"]),
            int(d["diskMaxUsedSpaceRatio"]),
            int(d["diskSpaceCleanForciblyRatio"]),
            [
                PlanFile(
                    f["name"],
                    int(f["fromOffset"]),
                    int(f["size"]),
                    int(f["mtime"]),
                    int(f["ageMs"]),
                    bool(f["expired"]),
                    f["reason"],
                    {str(k): int(v) for k, v in f["unconsumed"].items()},
                )
                for f in d["files"]
            ],
        )

    @classmethod
    def of(cls, plan: CleanPlan, *, disk_full: bool) -> PlanBody:
        return cls(
            plan.ratio,
            plan.decision.delete,
            plan.decision.forcibly,
            disk_full,
            plan.reserved_hours,
            plan.watermark,
            plan.force_watermark,
            [
                PlanFile(
                    r.file.name,
                    r.file.from_offset,
                    r.file.size,
                    r.file.mtime_ms,
                    r.age_ms,
                    r.expired,
                    r.reason,
                    r.unconsumed,
                )
                for r in plan.rows
            ],
        )
