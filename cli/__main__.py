"""`python -m cli` is the `relay` command."""

from cli import main

main()
