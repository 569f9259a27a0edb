"""`python -m hpcshuffle.cli ...`, for launchers that start an interpreter rather than the console script."""

from hpcshuffle.cli import main

main()
