"""Compiled hot paths for iqstate, used where this distribution is installed and built.

`iqstate_speedups.json_writer` (C, `json_writer.c`) writes the JSON serde's bytes. Where
it could not be built (no C compiler), importing it fails and iqstate takes its
pure-Python path, which writes the same bytes.
"""
