"""coroner_client: coronerd's query API for schedulers (docs/CLIENT.md).

    from coroner_client import Client
    with Client("coronerd:7070", token=...) as c:
        for job in c.list_jobs(verdict="failed"):
            r = c.report(job.job_id)
            print(r.verdict, r.culprit.host if r.culprit else None)

``python -m coroner_client.drain`` drains the hosts coronerd flags (dry run by default).
"""

from .client import Client, retrying
from .errors import (
    CoronerError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
)
from .model import Culprit, EvidenceLine, FaultClass, HangSuspect, Job, RankStatus, Report, Suspect, SuspectIncident, Verdict

__all__ = [
    "Client",
    "retrying",
    "CoronerError",
    "FailedPrecondition",
    "InvalidArgument",
    "NotFound",
    "PermissionDenied",
    "ResourceExhausted",
    "Unauthenticated",
    "Unavailable",
    "Culprit",
    "EvidenceLine",
    "FaultClass",
    "HangSuspect",
    "Job",
    "RankStatus",
    "Report",
    "Suspect",
    "SuspectIncident",
    "Verdict",
]
