"""The commands for this machine (`bot --help`'s first section), one module each."""
