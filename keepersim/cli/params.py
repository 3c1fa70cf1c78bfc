"""``keepersim params``: a preset's params as the chain's REST gateway answers them."""

from __future__ import annotations

import argparse
import json
from typing import Any

from keepersim.cli.common import write_json

__all__ = ["add_params_command", "run_params"]


def add_params_command(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "params",
        help="print the module's params (the chain's, and keepersim's extension)",
        description=(
            "Print the params of a preset as the chain's REST gateway answers "
            '/productscience/inference/inference/params ({"params": {...}}: the chain\'s '
            "Params, every field, 64-bit integers as strings, unset messages as null), with "
            'keepersim\'s extension params beside them ("extension_params"). '
            "default: the chain's code defaults (DefaultParams() at gonka v0.2.14, ee730031); "
            "mainnet: the live network's params (epochs 247-252, a v0.2.12 node) after the "
            "v0.2.13 and v0.2.14 upgrade handlers (docs/design/mainnet-preset.md). The output "
            "reads back unchanged as a governance entry, a proposal's MsgUpdateParams or a "
            "trace's params line."
        ),
    )
    parser.add_argument(
        "--preset", choices=("default", "mainnet"), default="default", help="(default: default)"
    )
    parser.add_argument("--out", help="write the JSON here instead of stdout")
    parser.set_defaults(handler=run_params)


def run_params(args: argparse.Namespace) -> int:
    from keepersim.types.chain_params_json import compute_module_params_json
    from keepersim.types.params import get_preset_params

    if args.out:
        from keepersim.outputs import check_output_file

        check_output_file(args.out, "--out")
    data = compute_module_params_json(get_preset_params(args.preset))
    if args.out:
        write_json(args.out, data)
    else:
        print(json.dumps(data, indent=2))
    return 0
