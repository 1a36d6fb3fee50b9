"""The drain hook's decisions, without a server."""

from coroner_client.drain import drain_command, plan, reason_of
from coroner_client.model import Suspect


def suspect(host, flagged=True, gpu=None, reason="2 root-cause failures"):
    return Suspect(host=host, gpu=gpu, score=2.0, expected=0.5, failures=2, hardware_failures=0, jobs_seen=3, flagged=flagged, reason=reason)


def test_only_flagged_hosts_not_handled_yet_once_each():
    suspects = [suspect("a"), suspect("a", gpu="0000:3b:00"), suspect("b", flagged=False), suspect("c")]
    actions, refused = plan(suspects, handled={"c"}, scheduler="slurm")
    assert [h for h, _ in actions] == ["a"] and refused == []


def test_names_that_are_not_plain_host_names_are_refused():
    actions, refused = plan([suspect("-rf"), suspect("a b"), suspect("node-1.example")], handled=set(), scheduler="kubernetes")
    assert refused == ["-rf", "a b"]
    assert actions == [("node-1.example", ["kubectl", "cordon", "node-1.example"])]


def test_the_slurm_reason_is_one_bounded_line():
    r = reason_of(suspect("a", gpu="0000:3b:00", reason="line one\nline two " + "x" * 300))
    assert r.startswith("coroner: GPU 0000:3b:00: line one line two") and "\n" not in r and len(r) <= 120
    assert drain_command("slurm", "a", r)[:4] == ["scontrol", "update", "nodename=a", "state=drain"]
