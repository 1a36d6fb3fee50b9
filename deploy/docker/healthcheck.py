#!/usr/bin/env python3
"""The image's HEALTHCHECK: GET /healthz on coronerd's HTTP address (no token needed).

Reads the address from CORONER_HTTP_ADDR (default 127.0.0.1:7071; a 0.0.0.0 or [::] bind is
asked on loopback) and speaks HTTPS when CORONER_TLS_CERT is set (the certificate names the
service, not 127.0.0.1, so it is not verified here: this checks that coronerd answers, not who).
Exit 0 when it answers 200, 1 otherwise, with the reason on stderr.
"""
import os
import ssl
import sys
import urllib.request

addr = os.environ.get("CORONER_HTTP_ADDR", "127.0.0.1:7071")
port = addr.rsplit(":", 1)[-1]
scheme = "https" if os.environ.get("CORONER_TLS_CERT") else "http"
url = f"{scheme}://127.0.0.1:{port}/healthz"
context = ssl._create_unverified_context() if scheme == "https" else None
try:
    with urllib.request.urlopen(url, timeout=4, context=context) as r:
        sys.exit(0 if r.status == 200 else 1)
except Exception as e:  # noqa: BLE001 (any failure is unhealthy; say which)
    print(f"coronerd health check {url}: {e}", file=sys.stderr)
    sys.exit(1)
