"""`python -m mnrt` is the `mnrt` command."""

from .runner.cli import main

main()
