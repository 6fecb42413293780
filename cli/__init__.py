"""The headless CLI behind launch.py: one module per family of subcommands, each adding its parsers."""
