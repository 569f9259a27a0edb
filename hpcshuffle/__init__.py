"""hpcshuffle: choose per run how much shuffling data-parallel training pays for."""

__version__ = "0.1.0"
