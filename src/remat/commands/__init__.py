"""Subcommands of the ``remat`` CLI, one module each (see cli.py), plus shared output helpers."""
