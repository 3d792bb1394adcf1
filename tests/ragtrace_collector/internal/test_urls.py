"""mask_credentials: what a logged URL keeps (which server) and what it loses (every credential)."""

from __future__ import annotations

import pytest

from ragtrace_collector.internal.urls import mask_credentials, mask_credentials_in


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:secret@redis:6379/0", "redis://:***@redis:6379/0"),
        ("rediss://default:secret@redis:6380/1?prefix=rt", "rediss://default:***@redis:6380/1?prefix=rt"),
        ("http://user:secret@tempo:4318/", "http://user:***@tempo:4318/"),
        ("https://ghp_token0123@example.com/v1/traces", "https://***@example.com/v1/traces"),  # a bare token
        ("user:secret@jaeger:4317", "user:***@jaeger:4317"),  # a gRPC target, no scheme
        ("http://u:secret@[::1]:4318/v1/traces#frag", "http://u:***@[::1]:4318/v1/traces#frag"),
        ("redis://:p@ss:w/rd@redis:6379/0", "redis://:***@redis:6379/0"),  # raw "@" and "/" in the password
        ("redis://:pa?ss#wd@redis:6379/0", "redis://:***@redis:6379/0"),  # raw "?" and "#"
        ("redis://redis:6379/0?password=secret&prefix=rt", "redis://redis:6379/0?password=***&prefix=rt"),
        ("redis://redis/0?password=se@cret", "redis://redis/0?password=***"),  # an "@" in a query value
        ("unix:///run/redis.sock?db=0&password=secret", "unix:///run/redis.sock?db=0&password=***"),
        ("http://tempo:4318/v1/traces?api_key=secret", "http://tempo:4318/v1/traces?api_key=***"),
    ],
)
def test_credentials_are_masked_the_server_kept(url, shown):
    assert mask_credentials(url) == shown


@pytest.mark.parametrize(
    "url",
    [
        "redis://redis:6379/0",
        "sqlite:///data/queue.sqlite",
        "http://127.0.0.1:4318/v1/traces",
        "jaeger:4317",
        "redis://redis:6379/0?prefix=rt&group=scorers",
        "",
        "not a url",
    ],
)
def test_urls_without_credentials_are_unchanged(url):
    assert mask_credentials(url) == url


def test_an_at_in_a_path_loses_the_host_rather_than_risk_a_password():
    assert mask_credentials("http://host/users/@me") == "http://***@me"


def test_urls_in_free_text_are_masked():
    text = "unsupported queue URL 'redis+sentinel://:secret@h:26379/0': use ... (also http://a:secret@b/c)"
    assert mask_credentials_in(text) == (
        "unsupported queue URL 'redis+sentinel://:***@h:26379/0': use ... (also http://a:***@b/c)"
    )
    assert mask_credentials_in("nothing to see: user@example.com") == "nothing to see: user@example.com"
