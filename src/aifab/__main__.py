"""Allow ``python -m aifab``."""

from aifab.cli.main import main

main()
