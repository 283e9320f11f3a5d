"""Colour themes shipped with Procession, as TOML data files."""
