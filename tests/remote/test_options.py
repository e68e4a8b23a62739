"""Storage options and failure classification: the rules remote stores apply, unit by unit."""

from __future__ import annotations

import pytest

from zarrsql.errors import ParameterError
from zarrsql.store.backends import split_options
from zarrsql.store.failures import Failure, classify
from zarrsql.store.options import NetworkOptions


def test_text_values_come_back_as_python_values(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "from-env")
    ours, theirs = split_options(
        "s3",
        {
            "anon": "TRUE",
            "client_kwargs": '{"region_name": "eu-west-1"}',
            "timeout": "2.5",
            "retries": "0",
            "concurrency": "4",
            "profile": "p",
        },
    )
    assert ours == NetworkOptions(timeout=2.5, retries=0, concurrency=4)
    assert theirs["anon"] is True
    assert theirs["client_kwargs"] == {"region_name": "eu-west-1"}
    assert theirs["profile"] == "p"
    assert "timeout" not in theirs


@pytest.mark.parametrize(
    ("key", "value"),
    [("timeout", "0"), ("retries", "-1"), ("concurrency", "many"), ("retries", "1.5"), ("client_kwargs", "{not json")],
)
def test_bad_option_values_are_refused_with_their_name(key, value):
    with pytest.raises(ParameterError, match=key if key != "client_kwargs" else "JSON"):
        split_options("http", {key: value})


def test_s3_is_anonymous_only_without_any_credentials(monkeypatch, tmp_path):
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    assert split_options("s3", {})[1]["anon"] is True
    assert "anon" not in split_options("s3", {"key": "k", "secret": "s"})[1]
    assert split_options("s3", {"anon": "false"})[1]["anon"] is False
    (tmp_path / "credentials").write_text("[default]\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    assert "anon" not in split_options("s3", {})[1]
    assert "anon" not in split_options("gs", {})[1]  # the rule is S3's only


class _Status(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"status {status}")
        self.status = status


@pytest.mark.parametrize(
    ("err", "kind"),
    [
        (FileNotFoundError("x"), Failure.MISSING),
        (_Status(404), Failure.MISSING),
        (PermissionError("x"), Failure.DENIED),
        (_Status(403), Failure.DENIED),
        (_Status(401), Failure.DENIED),
        (_Status(503), Failure.TRANSIENT),
        (_Status(429), Failure.TRANSIENT),
        (TimeoutError(), Failure.TRANSIENT),
        (ConnectionResetError(), Failure.TRANSIENT),
        (_Status(400), Failure.FATAL),
        (ValueError("bad url"), Failure.FATAL),
    ],
)
def test_failures_are_classified_by_type_and_status(err, kind):
    assert classify(err) is kind


def test_a_wrapped_status_is_found_through_the_cause():
    outer = OSError("wrapped")  # as s3fs wraps botocore's errors
    outer.__cause__ = _Status(503)
    assert classify(outer) is Failure.TRANSIENT
