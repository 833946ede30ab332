"""Compiled hot paths for iqstate, used where this distribution is installed and built.

`iqstate_speedups.json_writer` (C, `json_writer.c`) writes the JSON serde's bytes;
`iqstate_speedups.sealing` (`sealing.c`) computes and checks the CRC-32 seal of LMDB and
SQLite values; `versions` (`versions.c`) selects a versioned store's versions; `pairs`
(`pairs.c`) decodes a range's UTF-8 keys and values; `slots` (`slots.c`) builds query
objects without their `__init__`. Where one could not be built (no C compiler, no zlib
headers), importing it fails and iqstate takes its pure-Python path for that job, with the
same bytes.
"""
