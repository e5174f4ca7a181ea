"""CLI subcommands: each module is one `blockattn <name>` command (see blockattn.cli)."""
