"""The SDK's settings from the environment: a misspelt variable is named, a bad value never raises out of init()."""

from __future__ import annotations

import logging

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import ragtrace
from ragtrace import config


def test_a_misspelt_variable_is_named_with_the_setting_it_meant(caplog):
    environ = {
        "RAGTRACE_ENDPIONT": "http://collector:4318",  # the typo: spans would go to the default endpoint
        "RAGTRACE_HEADER": "authorization=Bearer x",
        "RAGTRACE_ENDPOINT": "http://elsewhere:4318",
        "RAGTRACE_DATA_DIR": "/var/lib/ragtrace",  # the collector's: far from every SDK setting
        "RAGTRACE_SAMPLING__RATE": "0.5",
        "RAGTRACE_JUDGE": "local",
    }
    with caplog.at_level(logging.WARNING, logger="ragtrace"):
        said = config._warn_misspelt_env(environ)
    assert said == [
        "RAGTRACE_ENDPIONT is not a ragtrace SDK setting and is ignored; did you mean RAGTRACE_ENDPOINT?",
        "RAGTRACE_HEADER is not a ragtrace SDK setting and is ignored; did you mean RAGTRACE_HEADERS?",
    ]
    assert "RAGTRACE_ENDPIONT" in caplog.text


@pytest.mark.parametrize(
    "name, value, said",
    [
        ("RAGTRACE_SERVICE_NAEM", "checkout", "did you mean RAGTRACE_SERVICE_NAME?"),
        # Issue 34: a bad RAGTRACE_EXPORT_TIMEOUT raised ValueError out of init() while other bad values are reported
        ("RAGTRACE_EXPORT_TIMEOUT", "soon", "RAGTRACE_EXPORT_TIMEOUT='soon' is not a number"),
    ],
)
def test_init_says_what_is_wrong_with_the_environment_and_goes_on(
    monkeypatch, caplog, restore_settings, name, value, said
):
    monkeypatch.setenv(name, value)
    with caplog.at_level(logging.WARNING, logger="ragtrace"):
        handle = ragtrace.init(exporter=InMemorySpanExporter(), set_global=False)
    handle.shutdown(1.0)
    assert said in caplog.text
