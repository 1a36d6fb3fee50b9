"""The client's tests run against a real coronerd that the Rust integration test
(tests/integration/python_client.rs) starts and fills; it passes what it made in the environment:

- CORONER_TEST_ADDRESS: coronerd's gRPC address
- CORONER_TEST_FAILED_JOB: a job that failed (its culprit rank 0 on CORONER_TEST_SUSPECT_HOST)
- CORONER_TEST_SUSPECT_HOST: the host coronerd flags
- CORONER_TEST_JOBS: how many jobs the server holds before these tests
- CORONER_BIN, CORONER_TEST_BUNDLE, CORONER_TEST_HOST_MAP: the coroner CLI, a failing bundle and
  its --host-map, to import while watching

Without CORONER_TEST_ADDRESS the server tests are skipped; the pure ones (test_drain_plan.py) run.
"""

import os

import pytest


@pytest.fixture
def env():
    if "CORONER_TEST_ADDRESS" not in os.environ:
        pytest.skip("no coronerd: run through `cargo test -p coroner-tests --test integration -- python_client`")
    return os.environ


@pytest.fixture
def client(env):
    from coroner_client import Client

    with Client(env["CORONER_TEST_ADDRESS"], timeout=30) as c:
        yield c
