"""``python -m reportdb`` runs the command-line tool."""

from .cli import main

main()
