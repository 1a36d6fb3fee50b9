"""coroner_client against a real coronerd (see conftest.py)."""

import os
import subprocess
import sys
import tempfile
import threading

import pytest

from coroner_client import Client, FaultClass, InvalidArgument, NotFound, Unavailable, Verdict


def test_list_jobs_visits_every_job_once_a_page_at_a_time(client, env):
    one_by_one = [j.job_id for j in client.list_jobs(page_size=1)]
    assert len(one_by_one) == int(env["CORONER_TEST_JOBS"]) and len(set(one_by_one)) == len(one_by_one), one_by_one
    assert one_by_one == [j.job_id for j in client.list_jobs()], "pages of one give the one-page order"
    failed = [j for j in client.list_jobs(verdict=Verdict.FAILED, page_size=1)]
    assert env["CORONER_TEST_FAILED_JOB"] in [j.job_id for j in failed]
    assert all(j.verdict is Verdict.FAILED and j.fault_class is FaultClass.SEGFAULT for j in failed), failed


def test_report_is_a_dataclass_with_the_culprit_and_the_ranks(client, env):
    r = client.report(env["CORONER_TEST_FAILED_JOB"])
    assert r.verdict is Verdict.FAILED
    c = r.culprit
    assert (c.rank, c.host, c.fault_class) == (0, env["CORONER_TEST_SUSPECT_HOST"], FaultClass.SEGFAULT), c
    assert c.reason and c.evidence and 0 < c.confidence <= 1, c
    assert {s.rank for s in r.ranks} == {0, 1} and [s.role for s in r.ranks if s.rank == 0] == ["culprit"], r.ranks
    # The JSON document stays available, and agrees.
    assert r.json()["first_failure"]["rank"] == 0 and r.json()["verdict"] == "failed"
    assert "segfault" in r.text.lower() or "segmentation" in r.text.lower()


def test_watch_follows_a_job_from_before_its_first_line_until_it_is_done(client, env):
    job = "py-watch"
    updates = client.watch(job)
    first = next(updates)
    assert (first.job_id, first.verdict) == (job, Verdict.RUNNING)
    imported = subprocess.run(
        [env["CORONER_BIN"], "--server", env["CORONER_TEST_ADDRESS"], "import", env["CORONER_TEST_BUNDLE"], "--job", job, "--host-map", env["CORONER_TEST_HOST_MAP"]],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert imported.returncode == 0, imported.stderr
    rest = list(updates)  # ends by itself once the verdict is done
    assert rest and rest[-1].verdict is Verdict.FAILED and rest[-1].culprit.rank == 0, rest
    assert all(u.verdict is Verdict.RUNNING for u in rest[:-1])


def test_suspects_flag_the_planted_host(client, env):
    suspects = client.suspects()
    flagged = [s for s in suspects if s.flagged]
    assert flagged and all(s.host == env["CORONER_TEST_SUSPECT_HOST"] for s in flagged), suspects
    host = next(s for s in flagged if s.gpu is None)
    assert host.failures >= 2 and host.score >= 2 * host.expected, host
    assert {i.fault_class for i in host.incidents} == {FaultClass.SEGFAULT}
    assert [s.host for s in client.suspects(page_size=1)] == [s.host for s in suspects]


def test_errors_are_typed(client, env):
    with pytest.raises(NotFound):
        client.report("no-such-job")
    with pytest.raises(InvalidArgument):
        client.report("bad job id with spaces/and/slashes")
    # A page token is bound to its list and filters.
    from coroner_client._proto import query_pb2 as pb

    first = client._stub.ListJobs(pb.ListJobsRequest(page_size=1))
    assert first.next_page_token
    with pytest.raises(InvalidArgument, match="filters"):
        client._call(client._stub.ListJobs, pb.ListJobsRequest(page_size=1, page_token=first.next_page_token, verdict="failed"))
    with Client("127.0.0.1:1", timeout=5) as nowhere:
        with pytest.raises(Unavailable) as e:
            nowhere.report("x")
        assert e.value.retryable


def _drain(env, *args):
    return subprocess.run(
        [sys.executable, "-m", "coroner_client.drain", "--address", env["CORONER_TEST_ADDRESS"], "--once", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_drain_hook_prints_each_drain_once_in_dry_run(env):
    host = env["CORONER_TEST_SUSPECT_HOST"]
    with tempfile.TemporaryDirectory() as tmp:
        state = os.path.join(tmp, "drained.json")
        out = _drain(env, "--state", state)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        want = f"dry run: would drain {host}: scontrol update nodename={host} state=drain 'reason=coroner: "
        assert sum(line.startswith(want) for line in lines) == 1, out.stdout
        assert any(line.startswith(f"job {env['CORONER_TEST_FAILED_JOB']} failed: segfault on {host} (rank 0)") for line in lines), out.stdout
        # Never the same host twice: the next run with the same state prints no drain.
        again = _drain(env, "--state", state)
        assert again.returncode == 0 and "would drain" not in again.stdout, again.stdout
        k8s = _drain(env, "--scheduler", "kubernetes")
        assert f"dry run: would drain {host}: kubectl cordon {host}" in k8s.stdout.splitlines(), k8s.stdout
