"""A real S3 server for the object-storage team-store tests: moto's server mode (``ThreadedMotoServer``) on
127.0.0.1, on a free port, for the whole session, reset between tests through its ``/moto-api/reset`` endpoint.
reportdb talks to it over HTTP through the very boto3 client it uses against AWS, MinIO or Ceph (no mock of the
client): the endpoint and credentials come from the standard ``AWS_*`` variables, set for each test (and inherited
by the CLI processes the tests start).
"""

from __future__ import annotations

import importlib.util
import logging
import urllib.request
import uuid
from typing import Any, Iterator

import pytest

REGION = "us-east-1"


class S3Server:
    """One moto S3 server on 127.0.0.1; ``endpoint`` is its http URL."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        host, port = self.server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"

    def reset(self) -> None:
        """Forget every bucket and object (moto's own reset endpoint)."""
        urllib.request.urlopen(urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST"), timeout=30)

    def client(self) -> Any:
        """A boto3 client of this server (for the tests' own look at the bucket)."""
        import boto3

        session = boto3.session.Session()  # a new one: it reads the environment as it is now (boto3.client caches)
        return session.client("s3", endpoint_url=self.endpoint, region_name=REGION, aws_access_key_id="test",
                              aws_secret_access_key="test")

    def close(self) -> None:
        self.server.stop()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """One moto S3 server for the whole session, or a skip saying what to install."""
    if importlib.util.find_spec("boto3") is None or importlib.util.find_spec("moto") is None:
        pytest.skip("boto3 and moto's server are not installed: pip install 'reportdb[test]'")
    server = S3Server()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def s3_url(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> str:
    """An empty bucket on a freshly reset server, as ``s3://BUCKET/PREFIX``, with the ``AWS_*`` variables pointing
    at the server (reportdb reads them as it reads them for any S3 service)."""
    s3_server.reset()
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    bucket = f"rdb-{uuid.uuid4().hex[:12]}"
    s3_server.client().create_bucket(Bucket=bucket)
    return f"s3://{bucket}/team/chunks"
