"""What the client returns: plain dataclasses and enums made from the protocol's messages, so a
scheduler's code never touches generated protobuf types."""

import enum
import json
from dataclasses import dataclass, field
from typing import List, Optional


class Verdict(str, enum.Enum):
    """A job's verdict; the values are coroner's names (``coroner report --json``)."""

    UNSPECIFIED = "unspecified"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    RUNNING = "running"
    UNKNOWN = "unknown"

    @property
    def done(self):
        """True once the job ended (succeeded, failed or unknown); false while it runs."""
        return self in (Verdict.SUCCEEDED, Verdict.FAILED, Verdict.UNKNOWN)


class FaultClass(str, enum.Enum):
    """What went wrong at the root of a failed job; UNSPECIFIED when nothing did (yet)."""

    UNSPECIFIED = "unspecified"
    HANG = "hang"
    CUDA_OOM = "cuda_oom"
    SEGFAULT = "segfault"
    KILLED = "killed"
    COLLECTIVE_MISMATCH = "collective_mismatch"
    NAN_INF = "nan_inf"
    SHAPE_MISMATCH = "shape_mismatch"
    CHECKPOINT_MISMATCH = "checkpoint_mismatch"
    TOKENIZER_MISMATCH = "tokenizer_mismatch"
    DATALOADER = "dataloader"
    PYTHON_EXCEPTION = "python_exception"
    NCCL_ERROR = "nccl_error"
    GPU_HARDWARE = "gpu_hardware"
    BUS_ERROR = "bus_error"
    NONE = "none"


def _enum(kind, pb_enum, prefix, number, fallback_text=""):
    """The Python enum member for a wire enum value, else for the older string field (a server
    from before the enums), else UNSPECIFIED."""
    try:
        name = pb_enum.Name(number)
    except ValueError:
        name = ""
    if name.startswith(prefix) and name != prefix + "UNSPECIFIED":
        return kind[name[len(prefix):]]
    try:
        return kind(fallback_text)
    except ValueError:
        return kind.UNSPECIFIED


def _opt(msg, name):
    """An optional proto3 scalar: its value when set, else None."""
    return getattr(msg, name) if msg.HasField(name) else None


@dataclass(frozen=True)
class Job:
    job_id: str
    verdict: Verdict
    fault_class: FaultClass
    culprit_rank: Optional[int]
    ranks: int
    lines: int
    first_seen_ns: int
    last_seen_ns: int


@dataclass(frozen=True)
class EvidenceLine:
    rank: Optional[int]
    time: str
    stream: str
    line: str


@dataclass(frozen=True)
class Culprit:
    """The first failure: who, where, what and why."""

    rank: Optional[int]
    host: Optional[str]
    fault_class: FaultClass
    reason: str
    confidence: float
    rule: Optional[str]
    time: Optional[str]
    evidence: List[EvidenceLine] = field(default_factory=list)
    #: When ``rank`` is None: the ranks it could be.
    candidates: List[int] = field(default_factory=list)


@dataclass(frozen=True)
class RankStatus:
    rank: Optional[int]
    label: str
    host: Optional[str]
    ended: Optional[str]
    last_step: Optional[int]
    lines: int
    #: ``culprit``, ``failed``, ``victim``, ``ok`` or ``unknown``.
    role: str


@dataclass(frozen=True)
class HangSuspect:
    """A rank suspected of hanging while the job still runs."""

    rank: int
    host: Optional[str]
    why: str
    summary: str
    last_step: Optional[int]
    peers_step: Optional[int]
    silent_ms: int
    last_lines: List[str] = field(default_factory=list)


@dataclass(frozen=True)
class Report:
    job_id: str
    verdict: Verdict
    culprit: Optional[Culprit]
    ranks: List[RankStatus]
    hang_suspects: List[HangSuspect]
    advice: List[str]
    notes: List[str]
    #: The report for a person, as ``coroner report`` prints it.
    text: str
    #: The whole report as JSON text (``coroner report --json``): everything the dataclasses leave out.
    json_text: str = field(repr=False, default="")

    def json(self):
        """The whole report as a dict."""
        return json.loads(self.json_text) if self.json_text else {}


@dataclass(frozen=True)
class SuspectIncident:
    job_id: str
    time: str
    fault_class: FaultClass
    rank: Optional[int]
    gpu: Optional[str]


@dataclass(frozen=True)
class Suspect:
    """A host (``gpu`` None) or one of its GPUs whose root-cause failures stand out."""

    host: str
    gpu: Optional[str]
    score: float
    expected: float
    failures: int
    hardware_failures: int
    jobs_seen: int
    #: True: drain it.
    flagged: bool
    reason: str
    incidents: List[SuspectIncident] = field(default_factory=list)


# Conversions from the generated messages (``pb`` is coroner_client._proto.query_pb2).


def verdict_of(pb, code, text=""):
    return _enum(Verdict, pb.Verdict, "VERDICT_", code, text)


def fault_class_of(pb, code, text=""):
    return _enum(FaultClass, pb.FaultClass, "FAULT_CLASS_", code, text)


def job_of(pb, m):
    return Job(
        job_id=m.job_id,
        verdict=verdict_of(pb, m.verdict_code, m.verdict),
        fault_class=fault_class_of(pb, m.fault_class_code, m.fault_class),
        culprit_rank=_opt(m, "culprit_rank"),
        ranks=m.ranks,
        lines=m.lines,
        first_seen_ns=m.first_seen_ns,
        last_seen_ns=m.last_seen_ns,
    )


def report_of(pb, resp):
    r = resp.report
    culprit = None
    if r.HasField("culprit"):
        c = r.culprit
        culprit = Culprit(
            rank=_opt(c, "rank"),
            host=c.host or None,
            fault_class=fault_class_of(pb, c.fault_class),
            reason=c.reason,
            confidence=c.confidence,
            rule=c.rule or None,
            time=c.time or None,
            evidence=[EvidenceLine(rank=_opt(e, "rank"), time=e.time, stream=e.stream, line=e.line) for e in c.evidence],
            candidates=list(c.candidates),
        )
    return Report(
        job_id=resp.job_id,
        verdict=verdict_of(pb, resp.verdict_code, resp.verdict),
        culprit=culprit,
        ranks=[
            RankStatus(rank=_opt(s, "rank"), label=s.label, host=s.host or None, ended=s.ended or None, last_step=_opt(s, "last_step"), lines=s.lines, role=s.role)
            for s in r.ranks
        ],
        hang_suspects=[
            HangSuspect(
                rank=h.rank,
                host=h.host or None,
                why=h.why,
                summary=h.summary,
                last_step=_opt(h, "last_step"),
                peers_step=_opt(h, "peers_step"),
                silent_ms=h.silent_ms,
                last_lines=list(h.last_lines),
            )
            for h in r.suspects
        ],
        advice=list(r.advice),
        notes=list(r.notes),
        text=resp.report_text,
        json_text=resp.report_json,
    )


def suspect_of(pb, s):
    return Suspect(
        host=s.host,
        gpu=s.gpu or None,
        score=s.score,
        expected=s.expected,
        failures=s.failures,
        hardware_failures=s.hardware_failures,
        jobs_seen=s.jobs_seen,
        flagged=s.flagged,
        reason=s.reason,
        incidents=[
            SuspectIncident(job_id=i.job_id, time=i.time, fault_class=fault_class_of(pb, i.fault_class_code, i.fault_class), rank=_opt(i, "rank"), gpu=i.gpu or None)
            for i in s.incidents
        ],
    )
