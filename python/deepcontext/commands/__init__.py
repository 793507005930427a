"""CLI subcommands: one module per command, each with `register(subparsers)` and `main(args) -> int`.

The CLI (deepcontext.cli) imports the modules named in COMMANDS; a command module adds its parser
in register() (calling `parser.set_defaults(func=main)`) and does its work in main(), raising deepcontext.errors.UserError for bad input.
"""

COMMANDS = ["run", "report", "analyze", "view", "diff", "merge", "export"]
