"""``ragtrace-collector``: serve | evaluate | results | metrics | rescore | dataset | demo.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and ``run(args) -> int``;
this file only dispatches, so importing the CLI stays cheap.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# litellm's import fetches a model cost map from the network unless told not to.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

SUBCOMMANDS = {
    "serve": ("ragtrace_collector.cli.serve", "run the collector: OTLP receivers, sampling, queue, scoring, /metrics"),
    "evaluate": ("ragtrace_collector.cli.evaluate", "score a Ragas-style JSONL file offline"),
    "results": ("ragtrace_collector.cli.results", "list scored records from the local results store"),
    "metrics": ("ragtrace_collector.cli.metrics", "list the metrics the collector can score and what each needs"),
    "rescore": ("ragtrace_collector.cli.rescore", "score stored records again, new scores kept beside the old"),
    "dataset": ("ragtrace_collector.cli.dataset", "export stored records with their human labels as a dataset"),
    "demo": ("ragtrace_collector.cli.demo", "the main job: collector + embedded judge fed by the example pipeline"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ragtrace-collector", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        module = importlib.import_module(module_name)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # Import only the chosen subcommand's module when we can tell which it is.
    if argv and argv[0] in SUBCOMMANDS:
        module = importlib.import_module(SUBCOMMANDS[argv[0]][0])
        p = argparse.ArgumentParser(prog=f"ragtrace-collector {argv[0]}", description=SUBCOMMANDS[argv[0]][1])
        module.add_arguments(p)
        return int(module.run(p.parse_args(argv[1:])) or 0)
    args = build_parser().parse_args(argv)
    return int(args._run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
