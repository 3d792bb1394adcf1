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


# Every variable the SDK reads, a bad value for it, what the warning says, and the setting it falls back to.
BAD_VALUES = [
    ("RAGTRACE_SERVICE_NAME", None, None, None),  # any text is a name: nothing can be wrong with it
    ("OTEL_SERVICE_NAME", None, None, None),
    (
        "RAGTRACE_ENDPOINT",
        "collector:4318",
        "is not an http:// or https:// URL",
        ("endpoint", config.DEFAULT_HTTP_ENDPOINT),
    ),
    (
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "ftp://collector/v1/traces",
        "is not an http:// or https:// URL",
        ("endpoint", config.DEFAULT_HTTP_ENDPOINT),
    ),
    (
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "https://",
        "is not an http:// or https:// URL",
        ("endpoint", config.DEFAULT_HTTP_ENDPOINT),
    ),
    ("RAGTRACE_PROTOCOL", "http/json", "is not supported", ("protocol", "http/protobuf")),
    ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "smtp", "is not an OTLP protocol", ("protocol", "http/protobuf")),
    ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc/json", "is not an OTLP protocol", ("protocol", "http/protobuf")),
    ("RAGTRACE_HEADERS", "Bearer abc", "is not key=value pairs", ("headers", None)),
    ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "authorization", "is not key=value pairs", ("headers", None)),
    ("OTEL_EXPORTER_OTLP_HEADERS", "=x", "is not key=value pairs", ("headers", None)),
    ("RAGTRACE_CAPTURE_CONTENT", "flase", "is not true or false", ("capture_content", False)),
    ("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "maybe", "is not true or false", ("capture_content", False)),
    ("RAGTRACE_MAX_ATTRIBUTE_LENGTH", "16k", "is not an integer", ("max_attribute_length", 16_384)),
    ("RAGTRACE_MAX_DOCUMENTS", "-3", "is not a positive integer", ("max_documents", 20)),
    ("RAGTRACE_MAX_SPAN_CHARS", "0", "is not a positive integer", ("max_span_chars", 262_144)),
    ("RAGTRACE_MAX_QUEUE_SIZE", "2.5", "is not an integer", ("max_queue_size", 2048)),
    ("OTEL_BSP_MAX_QUEUE_SIZE", "lots", "is not an integer", ("max_queue_size", 2048)),
    ("OTEL_BSP_SCHEDULE_DELAY", "-1", "is not a positive integer", ("schedule_delay_ms", 1000)),
    ("RAGTRACE_EXPORT_TIMEOUT", "0", "is not a number of seconds above 0", ("export_timeout_s", 5.0)),
    ("RAGTRACE_OTLP_ENCODER", "protoc", "is not an OTLP encoder", ("otlp_encoder", "ragtrace")),
    ("RAGTRACE_SHUTDOWN_TIMEOUT", "inf", "is not a finite number", ("shutdown_timeout_s", 5.0)),
]


def test_every_variable_read_has_a_bad_value_case():
    read = {name for var in config.Env.all() for name in var.names}
    assert read == {name for name, *_ in BAD_VALUES}
    assert {n for n in read if n.startswith("RAGTRACE_")} == config.SDK_ENV_VARS


@pytest.fixture
def clean_env(monkeypatch):
    """No SDK variable set, and no bad value remembered as already reported."""
    for var in config.Env.all():
        for name in var.names:
            monkeypatch.delenv(name, raising=False)
    config._REPORTED.clear()
    yield monkeypatch
    config._REPORTED.clear()


@pytest.mark.parametrize("name, value, said, fallback", [b for b in BAD_VALUES if b[1] is not None])
def test_a_bad_value_is_reported_once_and_defaulted(clean_env, caplog, restore_settings, name, value, said, fallback):
    clean_env.setenv(name, value)
    with caplog.at_level(logging.WARNING, logger="ragtrace"):
        options = config.Options.resolve()
        again = config.Options.resolve()  # a second init(): not said twice
        handle = ragtrace.init(exporter=InMemorySpanExporter(), set_global=False)
    handle.shutdown(1.0)
    field, used = fallback
    assert getattr(options, field) == used == getattr(again, field)
    lines = [r.getMessage() for r in caplog.records if name in r.getMessage()]
    assert len(lines) == 1, lines
    assert said in lines[0] and "using" in lines[0]
    if "HEADERS" in name:  # headers carry credentials: the value is never logged
        assert value not in lines[0]
    else:
        assert repr(value) in lines[0]


def test_a_bad_capture_value_records_no_content(clean_env, caplog, restore_settings):
    """A typo of "false" must not turn content capture on: the one fallback that is not the default."""
    clean_env.setenv("RAGTRACE_CAPTURE_CONTENT", "of")
    with caplog.at_level(logging.WARNING, logger="ragtrace"):
        handle = ragtrace.init(exporter=InMemorySpanExporter(), set_global=False)
    handle.shutdown(1.0)
    assert config.SETTINGS.capture_content is False
    assert "RAGTRACE_CAPTURE_CONTENT='of' is not true or false" in caplog.text


def test_arguments_win_over_the_environment_and_good_values_are_read(clean_env):
    clean_env.setenv("RAGTRACE_MAX_DOCUMENTS", "7")
    clean_env.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "64")
    clean_env.setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer x, tenant = a ,")
    clean_env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "GRPC")
    clean_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317")  # gRPC's host:port form
    o = config.Options.resolve(max_queue_size=32)
    assert (o.max_documents, o.max_queue_size, o.protocol, o.endpoint) == (7, 32, "grpc", "collector:4317")
    assert o.headers == {"authorization": "Bearer x", "tenant": "a"}
    assert config.Options.resolve(headers={"k": "v"}).headers == {"k": "v"}
    assert not o.endpoint_asked
    with pytest.raises(ValueError):  # the app's own argument is a programming error, as before
        config.Options.resolve(protocol="http/json")


@pytest.mark.parametrize(
    "protocol, encoder", [("http/protobuf", "ragtrace"), ("http/protobuf", "opentelemetry"), ("grpc", "ragtrace")]
)
def test_a_malformed_otel_headers_value_never_reaches_the_log(tmp_path, protocol, encoder):
    """OpenTelemetry's exporters parse ``OTEL_EXPORTER_OTLP_HEADERS`` themselves and logged a malformed value whole
    (a bearer token in the app's log). In a real process, with logging on at DEBUG, no line holds the value."""
    import subprocess
    import sys

    secret = "Bearer s3cr3t-token-0123456789"
    script = (
        "import logging; logging.basicConfig(level=logging.DEBUG)\n"
        "import ragtrace\n"
        "ragtrace.init(endpoint='http://127.0.0.1:9', set_global=False).shutdown(1.0)\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith(("RAGTRACE_", "OTEL_"))} | {
        "OTEL_EXPORTER_OTLP_HEADERS": f"authorization {secret}",
        "RAGTRACE_PROTOCOL": protocol,
        "RAGTRACE_OTLP_ENCODER": encoder,
    }
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "OTEL_EXPORTER_OTLP_HEADERS" in done.stderr  # ragtrace said which variable is wrong
    assert "s3cr3t" not in done.stderr + done.stdout
