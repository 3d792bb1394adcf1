"""Config resolution: defaults → YAML → environment → overrides, and the shipped example file."""

from __future__ import annotations

import logging

import pydantic
import pytest
import yaml

from ragtrace_collector.config import OTHER_ENV_VARS, CollectorConfig, describe_error, env_overrides, load_config
from ragtrace_collector.scoring.options import ScoringOptions
from tests.support.paths import REPO

EXAMPLE = REPO / "collector" / "collector.example.yaml"


def test_defaults_need_no_file():
    c = load_config(environ={})
    assert (c.listen.host, c.listen.grpc_port, c.listen.http_port, c.listen.metrics_port) == (
        "127.0.0.1",
        4317,
        4318,
        9464,
    )
    assert c.judge.model == "local" and c.role == "all"
    assert c.queue_url.startswith("sqlite:///") and c.queue_url.endswith("queue.sqlite")


def test_precedence_yaml_env_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("sampling: {rate: 0.5, pipelines: {a: 0.2}}\nlisten: {http_port: 1111}\nrole: worker\n")
    env = {
        "RAGTRACE_SAMPLING__RATE": "0.25",
        "RAGTRACE_QUEUE__URL": "redis://127.0.0.1:6379/0",
        "RAGTRACE_SAMPLING__PIPELINES__B": "0.75",
        "RAGTRACE_ENDPOINT": "http://x",  # the SDK's variable: not a config key, ignored
        "RAGTRACE_AUTH__BEARER_TOKEN": "s3cret-0123456789abcdef",
    }
    c = load_config(str(path), overrides={"role": "receiver"}, environ=env)
    assert c.sampling.rate == 0.25
    assert c.sampling.pipelines == {"a": 0.2, "b": 0.75}
    assert c.listen.http_port == 1111
    assert c.queue_url == "redis://127.0.0.1:6379/0"
    assert c.auth.bearer_token == "s3cret-0123456789abcdef"
    assert c.role == "receiver"


def test_config_file_from_environment(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("data_dir: /tmp/x\n")
    assert load_config(environ={"RAGTRACE_CONFIG": str(path)}).data_dir == "/tmp/x"


def test_bad_values_name_the_key(tmp_path):
    with pytest.raises(pydantic.ValidationError, match="rate"):
        load_config(overrides={"sampling": {"rate": 1.5}}, environ={})
    with pytest.raises(pydantic.ValidationError, match="listne"):
        load_config(overrides={"listne": {}}, environ={})
    with pytest.raises(FileNotFoundError):
        load_config(str(tmp_path / "missing.yaml"), environ={})
    broken = tmp_path / "broken.yaml"
    broken.write_text("sampling: {rate: 0.5\n")
    with pytest.raises(ValueError, match=r"broken\.yaml: not valid YAML"):
        load_config(str(broken), environ={})


def test_env_ignores_unknown_names():
    assert env_overrides({"RAGTRACE_NOPE": "1", "RAGTRACE_LISTEN__NOPE": "2", "OTHER": "3"}) == {}


def test_example_file_is_complete_and_valid():
    data = yaml.safe_load(EXAMPLE.read_text())
    c = CollectorConfig.model_validate(data)
    assert c == load_config(str(EXAMPLE), environ={})

    def keys(model, prefix=""):
        out = set()
        for name, _f in type(model).model_fields.items():
            value = getattr(model, name)
            out.add(prefix + name)
            if isinstance(value, pydantic.BaseModel):
                out |= keys(value, prefix + name + ".")
        return out

    def present(d, prefix=""):
        out = set()
        for k, v in d.items():
            out.add(prefix + k)
            if isinstance(v, dict) and k not in ("pipelines", "headers"):
                out |= present(v, prefix + k + ".")
        return out

    assert keys(CollectorConfig()) <= present(data)


# --- one environment scheme: shorthands, legacy aliases, unknown names --------------------------------


def test_judge_shorthand_from_environment_and_yaml(tmp_path):
    """RAGTRACE_JUDGE=openai/x (as evaluate documented) is judge.model, not a ValidationError."""
    c = load_config(environ={"RAGTRACE_JUDGE": "openai/x", "RAGTRACE_JUDGE__TIMEOUT_SECONDS": "12"})
    assert (c.judge.model, c.judge.timeout_seconds) == ("openai/x", 12.0)
    path = tmp_path / "c.yaml"
    path.write_text("judge: openai/gpt-4o-mini\nqueue: redis://127.0.0.1:6379/0\n")
    c = load_config(str(path), environ={"RAGTRACE_JUDGE__BASE_URL": "http://judge:8000/v1"})
    assert (c.judge.model, c.judge.base_url) == ("openai/gpt-4o-mini", "http://judge:8000/v1")
    assert c.queue_url == "redis://127.0.0.1:6379/0"
    # the explicit key wins over the shorthand; the environment over the file
    c = load_config(str(path), environ={"RAGTRACE_JUDGE": "openai/a", "RAGTRACE_JUDGE__MODEL": "openai/b"})
    assert c.judge.model == "openai/b"
    assert load_config(str(path), overrides={"judge": "local"}, environ={"RAGTRACE_JUDGE": "openai/a"}).judge.model == (
        "local"
    )


def test_legacy_judge_variables_are_aliases():
    env = {
        "RAGTRACE_JUDGE_BASE_URL": "http://judge:8000/v1",
        "RAGTRACE_JUDGE_API_KEY": "k",
        "RAGTRACE_EMBEDDING_MODEL": "openai/text-embedding-3-small",
    }
    j = load_config(environ=env).judge
    assert (j.base_url, j.api_key, j.embedding_model) == ("http://judge:8000/v1", "k", "openai/text-embedding-3-small")
    env["RAGTRACE_JUDGE__BASE_URL"] = "http://canonical/v1"
    assert load_config(environ=env).judge.base_url == "http://canonical/v1"


def test_misspelt_variable_is_a_warning_naming_it_and_the_closest_key(caplog):
    env = {"RAGTRACE_SAMPLNG__RATE": "0.25", "RAGTRACE_LISTEN__PROT": "1"}
    with caplog.at_level(logging.WARNING, logger="ragtrace_collector.config"):
        c = load_config(environ=env)
    assert c.sampling.rate == 1.0  # ignored, not applied
    messages = [r.getMessage() for r in caplog.records if r.name == "ragtrace_collector.config"]
    assert len(messages) == 2
    [sampling] = [m for m in messages if "RAGTRACE_SAMPLNG__RATE" in m]
    assert "did you mean RAGTRACE_SAMPLING__RATE?" in sampling


def test_variables_of_the_sdk_and_other_tools_are_never_warned_about(caplog):
    env = {name: "x" for name in OTHER_ENV_VARS if name != "RAGTRACE_CONFIG"}
    for name in (
        "RAGTRACE_ENDPOINT",
        "RAGTRACE_PROTOCOL",
        "RAGTRACE_SERVICE_NAME",
        "RAGTRACE_CAPTURE_CONTENT",
        "RAGTRACE_HEADERS",
        "RAGTRACE_EXAMPLE_MODEL",
        "RAGTRACE_EXAMPLE_API_BASE",
        "RAGTRACE_SHARED_DIR",
        "RAGTRACE_EMBEDDING_ONNX",
        "RAGTRACE_EMBEDDING_TOKENIZER",
    ):
        assert name in env
    env.update(
        {
            "RAGTRACE_JUDGE_BASE_URL": "http://j",
            "RAGTRACE_ROLE": "worker",
            "RAGTRACE_DATA_DIR": "/d",
            "RAGTRACE_SCORING__PIPELINES__SUPPORT": "[faithfulness]",
            "RAGTRACE_JUDGE": "openai/x",
        }
    )
    with caplog.at_level(logging.WARNING, logger="ragtrace_collector.config"):
        c = load_config(environ=env)
    assert not [r for r in caplog.records if r.name == "ragtrace_collector.config"]
    assert (c.role, c.data_dir, c.scoring.pipelines) == ("worker", "/d", {"support": ["faithfulness"]})


def test_environment_values_are_typed_by_the_model():
    env = {
        "RAGTRACE_AUTH__BEARER_TOKEN": "1234567890123456",  # a string key, though it reads as a number
        "RAGTRACE_LISTEN__GRPC_PORT": "null",
        "RAGTRACE_SCORING__METRICS": "[faithfulness, bleu]",
        "RAGTRACE_SCORING__OPTIONS__ANSWER_CORRECTNESS_WEIGHTS": "[1, 1]",
        "RAGTRACE_SAMPLING__ALWAYS__ERRORS": "false",
    }
    c = load_config(environ=env)
    assert c.auth.bearer_token == "1234567890123456" and c.listen.grpc_port is None
    assert c.scoring.metrics == ["faithfulness", "bleu"]
    assert c.scoring.options.answer_correctness_weights == (0.5, 0.5)
    assert c.sampling.always.errors is False


# --- scoring.options: every metric option from YAML ------------------------------------------------------


def test_yaml_scoring_options_reach_the_metrics(tmp_path):
    dag = tmp_path / "dag.yaml"
    dag.write_text('root: {instruction: "Is it polite?", options: {yes: {score: 1}, no: {score: 0}}}\n')
    path = tmp_path / "c.yaml"
    path.write_text(
        "scoring:\n"
        "  metrics: [faithfulness, geval, dag, safety]\n"
        "  options:\n"
        "    answer_relevancy_variant: questions\n"
        "    idk_counts_as_supported: true\n"
        "    safety_categories: [toxic, bias]\n"
        "    safety_votes: 5\n"
        "    rouge_type: rouge1\n"
        '    geval: {criteria: "Is the answer concise?", params: [response], max_score: 5}\n'
        f"    dag: {dag}\n"
    )
    c = load_config(str(path), environ={"RAGTRACE_SCORING__OPTIONS__QUESTIONS_N": "2"})
    options = ScoringOptions.from_config(c.scoring.options)
    assert options.geval == {"criteria": "Is the answer concise?", "params": ["response"], "max_score": 5}
    assert options.answer_relevancy_variant == "questions" and options.idk_counts_as_supported is True
    assert options.safety_categories == ("toxic", "bias") and options.safety_votes == 5
    assert options.rouge_type == "rouge1" and options.questions_n == 2
    assert options.dag == str(dag)
    env = {"RAGTRACE_SCORING__OPTIONS__GEVAL__CRITERIA": "Is it polite?", "RAGTRACE_SCORING__METRICS": "[geval]"}
    assert ScoringOptions.from_config(load_config(environ=env).scoring.options).geval == {"criteria": "Is it polite?"}


def test_bad_options_are_one_line_errors_naming_the_key(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "scoring:\n  options:\n    answer_relevancy_variant: statement\n    safety_categories: [toxic, rude]\n"
    )
    with pytest.raises(pydantic.ValidationError) as info:
        load_config(str(path), environ={})
    message = describe_error(info.value)
    assert "\n" not in message
    assert "scoring.options.answer_relevancy_variant" in message and "'statement'" in message
    assert "scoring.options.safety_categories[1]" in message and "'rude'" in message
    with pytest.raises(pydantic.ValidationError) as info:
        load_config(overrides={"scoring": {"options": {"safety_votes": 2}}}, environ={})
    assert describe_error(info.value).startswith("scoring.options.safety_votes: must be a positive odd number")
    with pytest.raises(pydantic.ValidationError) as info:
        load_config(overrides={"scoring": {"optoins": {}}}, environ={})
    assert describe_error(info.value) == "scoring.optoins: unknown key; did you mean options?"


def test_a_metric_listed_without_its_options_fails_at_load():
    """geval/dag in scoring.metrics with nothing to score against: an error now, not every record skipped later."""
    with pytest.raises(pydantic.ValidationError, match=r"scoring\.options\.geval"):
        load_config(overrides={"scoring": {"metrics": ["faithfulness", "geval"]}}, environ={})
    with pytest.raises(pydantic.ValidationError, match=r"scoring\.options\.dag"):
        load_config(overrides={"scoring": {"pipelines": {"support": ["dag"]}}}, environ={})
    with pytest.raises(pydantic.ValidationError, match="criteria"):
        load_config(overrides={"scoring": {"metrics": ["geval"], "options": {"geval": {"name": "x"}}}}, environ={})
    with pytest.raises(pydantic.ValidationError, match="no such DAG file"):
        load_config(overrides={"scoring": {"options": {"dag": "/nonexistent/dag.yaml"}}}, environ={})


def test_from_config_accepts_a_mapping_and_names_the_key():
    assert ScoringOptions.from_config({"rouge_type": "rouge2"}).rouge_type == "rouge2"
    with pytest.raises(ValueError, match=r"^scoring\.options\.rouge_type: "):
        ScoringOptions.from_config({"rouge_type": "rouge9"})
    with pytest.raises(ValueError, match="answer_relevancy_variant"):
        ScoringOptions(answer_relevancy_variant="nope")


# --- each default written once ---------------------------------------------------------------------------


def test_each_default_is_written_once():
    from ragtrace_collector.receiver.ingest import Ingestor
    from ragtrace_collector.scoring.metrics import DEFAULT_METRICS

    assert CollectorConfig().scoring.metrics == list(DEFAULT_METRICS)
    assert DEFAULT_METRICS == (
        "faithfulness",
        "hallucination",
        "answer_relevancy",
        "context_precision",
        "context_relevancy",
    )
    assert ScoringOptions() == ScoringOptions.from_config(CollectorConfig().scoring.options)
    assert ScoringOptions.from_config(None) == ScoringOptions()
    limits = CollectorConfig().limits
    ingestor = Ingestor(lambda request: None)
    assert ingestor.max_pending == limits.max_pending_requests == 16
    assert (ingestor.max_request_bytes, ingestor.retry_after_seconds, ingestor.max_loop_lag) == (
        limits.max_request_bytes,
        limits.retry_after_seconds,
        limits.max_loop_lag_seconds,
    )


def test_plain_construction_reads_no_environment(monkeypatch):
    monkeypatch.setenv("RAGTRACE_SAMPLING__RATE", "0.5")
    assert CollectorConfig().sampling.rate == 1.0
    assert load_config().sampling.rate == 0.5


def test_every_variable_the_sdk_reads_is_known_to_the_collector():
    """An app and its collector often share an environment: the SDK's own variables must not be warned about."""
    from ragtrace.config import SDK_ENV_VARS  # the SDK's table of every variable it reads

    assert SDK_ENV_VARS, "the SDK's table of variables is empty"
    assert set(OTHER_ENV_VARS) >= SDK_ENV_VARS, sorted(SDK_ENV_VARS - set(OTHER_ENV_VARS))


def test_explorer_trace_links_must_be_urls_naming_the_trace():
    import pytest
    from pydantic import ValidationError

    from ragtrace_collector.config import load_config

    jaeger = {"Jaeger": "http://j:16686/trace/{trace_id}"}
    cfg = load_config(overrides={"explorer": {"trace_links": jaeger}}, environ={})
    assert cfg.explorer.trace_links == jaeger
    for bad in ("http://j:16686/search", "javascript:alert('{trace_id}')"):
        with pytest.raises(ValidationError, match="trace link"):
            load_config(overrides={"explorer": {"trace_links": {"x": bad}}}, environ={})
    env = load_config(environ={"RAGTRACE_EXPORT__RESULTS_RETENTION__MAX_AGE_HOURS": "null"})
    assert env.export.results_retention.max_age_hours is None


# Numbers bounded by a validator of their own rather than by ge/gt: a sampling rate, a vote count, score limits.
_VALIDATED_NUMBERS = {
    "sampling.rate",
    "sampling.pipelines",
    "scoring.options.answer_correctness_weights",
    "sampling.always.top_score_below",
    "scoring.options.safety_votes",
    "scoring.options.geval.min_score",
    "scoring.options.geval.max_score",
}


def _numbers(model: type[pydantic.BaseModel], prefix: str = ""):
    """Every int or float leaf of the config tree, with the lower bound it declares (None: none)."""
    from ragtrace_collector.config import _section_of

    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        section = _section_of(field.annotation)
        if section is not None:
            yield from _numbers(section, path + ".")
            continue
        args = getattr(field.annotation, "__args__", (field.annotation,))
        if not any(a in (int, float) for a in args) or any(a is bool for a in args):
            continue
        bound = next((m for m in field.metadata if hasattr(m, "ge") or hasattr(m, "gt")), None)
        yield path, bound


def test_every_number_in_the_config_has_a_lower_bound():
    """No negative interval, depth, size or count gets past the model (issue 34): each component is built from a
    section that is valid as a whole."""
    unbounded = [path for path, bound in _numbers(CollectorConfig) if bound is None and path not in _VALIDATED_NUMBERS]
    assert unbounded == []
    assert len(list(_numbers(CollectorConfig))) > 50  # the walk reaches the whole tree


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("assembly.sweep_interval_seconds", 0),
        ("assembly.grace_seconds", -1),
        ("assembly.max_inflight_traces", 0),
        ("queue.max_depth", -5),
        ("scoring.lease_seconds", -1),
        ("scoring.backoff_initial_seconds", 0),
        ("limits.max_loop_lag_seconds", -0.5),
        ("limits.retry_after_seconds", -1),
        ("sampling.budget.records_per_minute", -10),
        ("judge.timeout_seconds", 0),
    ],
)
def test_a_negative_interval_or_depth_is_one_line_naming_the_key(key, value):
    section, _, leaf = key.rpartition(".")
    overrides: dict = {}
    node = overrides
    for part in section.split("."):
        node = node.setdefault(part, {})
    node[leaf] = value
    with pytest.raises(pydantic.ValidationError) as caught:
        load_config(overrides=overrides, environ={})
    line = describe_error(caught.value)
    assert line.startswith(f"{key}: Input should be greater than") and "\n" not in line


def test_the_backoff_may_not_shrink():
    with pytest.raises(pydantic.ValidationError, match="backoff_max_seconds"):
        load_config(overrides={"scoring": {"backoff_initial_seconds": 10, "backoff_max_seconds": 1}}, environ={})
