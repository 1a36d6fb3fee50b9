"""``Client``: coronerd's Query service for schedulers and scripts.

Lists are read a page at a time behind iterators (``page_size``/``page_token``, docs/API.md), so
a long history never arrives in one answer. Every failure is a typed ``CoronerError``
(``errors.py``); ``Unavailable`` is the one to retry.
"""

import time

import grpc

from . import errors, model

try:
    from ._proto import query_pb2 as pb
    from ._proto import query_pb2_grpc as pb_grpc
except ImportError as e:  # pragma: no cover - a checkout used without building
    raise ImportError(
        "coroner_client's gRPC stubs are missing: they are generated when the package is built; "
        "install it with `pip install ./python/client` (or run python/client/build_stubs.py OUT)"
    ) from e

NS = 1_000_000_000


def _target(address, ca):
    """The gRPC target and whether to speak TLS: ``https://`` or a CA means TLS."""
    for scheme, tls in (("https://", True), ("http://", False)):
        if address.startswith(scheme):
            return address[len(scheme):].rstrip("/"), tls
    return address, ca is not None


def _since_ns(since):
    """``since`` as ns since the epoch: None (no bound), a number of seconds since the epoch, or a
    ``datetime``."""
    if since is None:
        return 0
    if hasattr(since, "timestamp"):
        return int(since.timestamp() * NS)
    return int(since * NS)


class Client:
    """A connection to coronerd's gRPC address.

    ``address``: ``host:port``, ``http://host:port`` or ``https://host:port``.
    ``token``: the read token, when coronerd enforces one (sent as ``authorization: Bearer``).
    ``ca``: for TLS, the PEM of the CA the server's certificate chains to (a path or bytes); with
    ``https://`` and no ``ca``, the system's public roots.
    ``timeout``: seconds each call may take (watches have none).
    """

    def __init__(self, address, token=None, ca=None, timeout=30.0):
        target, tls = _target(address, ca)
        if tls:
            pem = None
            if ca is not None:
                if isinstance(ca, (bytes, bytearray)):
                    pem = bytes(ca)
                else:
                    with open(ca, "rb") as f:
                        pem = f.read()
            self._channel = grpc.secure_channel(target, grpc.ssl_channel_credentials(root_certificates=pem))
        else:
            self._channel = grpc.insecure_channel(target)
        self._stub = pb_grpc.QueryStub(self._channel)
        token = (token or "").strip()
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._timeout = timeout

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, method, request):
        try:
            return method(request, timeout=self._timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None

    def _pages(self, method, request, items):
        """Every item of a paged list, asking for one page at a time."""
        token = ""
        while True:
            request.page_token = token
            page = self._call(method, request)
            yield from getattr(page, items)
            if not page.next_page_token:
                return
            if page.next_page_token == token:
                raise errors.CoronerError(grpc.StatusCode.INTERNAL, "coronerd answered the same page token twice")
            token = page.next_page_token

    def list_jobs(self, verdict=None, fault_class=None, since=None, page_size=0):
        """Jobs, most recently seen first, as ``Job``s: an iterator that asks for the next page
        when it needs it. ``verdict`` / ``fault_class``: a ``Verdict`` / ``FaultClass`` or its
        name; ``since``: only jobs seen at or after it (seconds since the epoch or a datetime)."""
        request = pb.ListJobsRequest(
            verdict=model.Verdict(verdict).value if verdict else "",
            fault_class=model.FaultClass(fault_class).value if fault_class else "",
            since_ns=_since_ns(since),
            page_size=page_size,
        )
        for m in self._pages(self._stub.ListJobs, request, "jobs"):
            yield model.job_of(pb, m)

    def report(self, job):
        """The job's current ``Report``."""
        resp = self._call(self._stub.GetReport, pb.GetReportRequest(job_id=job))
        return model.report_of(pb, resp)

    def watch(self, job):
        """The job's report now, then at every change of its headline (verdict, culprit, hang
        suspects), ending after the first report whose verdict is done. A job not seen yet is
        watched from before its first line. Raises ``Unavailable`` when coronerd ends the watch
        before the job is done (it restarted): watch again."""
        stream = self._stub.WatchJob(pb.GetReportRequest(job_id=job), metadata=self._metadata)
        try:
            for resp in stream:
                report = model.report_of(pb, resp)
                yield report
                if report.verdict.done:
                    return
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None
        finally:
            stream.cancel()
        raise errors.Unavailable(grpc.StatusCode.UNAVAILABLE, f"coronerd ended the watch of {job} before the job was done; watch again")

    def suspects(self, since=None, all=False, page_size=0):
        """Hosts and GPUs whose root-cause failures stand out, flagged first (``Suspect.flagged``:
        drain it); ``all`` adds those with failures that are not flagged. A list."""
        request = pb.ListSuspectsRequest(since_ns=_since_ns(since), all=all, page_size=page_size)
        return [model.suspect_of(pb, s) for s in self._pages(self._stub.ListSuspects, request, "suspects")]

    def wait_until_ready(self, within=30.0):
        """Blocks until the channel connects (at most ``within`` seconds); ``Unavailable`` if not."""
        try:
            grpc.channel_ready_future(self._channel).result(timeout=within)
        except grpc.FutureTimeoutError:
            raise errors.Unavailable(grpc.StatusCode.UNAVAILABLE, f"coronerd did not answer within {within:g} s") from None


def retrying(call, attempts=5, first_wait=0.5):
    """``call()``, retried with doubling waits while it raises a retryable ``CoronerError``
    (``Unavailable``, ``ResourceExhausted``); the last error otherwise."""
    wait = first_wait
    for attempt in range(attempts):
        try:
            return call()
        except errors.CoronerError as e:
            if not e.retryable or attempt == attempts - 1:
                raise
            time.sleep(wait)
            wait *= 2
