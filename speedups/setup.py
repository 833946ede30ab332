"""The C extensions; everything else is in pyproject.toml.

Each is `optional=True`: where one cannot be built (no C compiler, or no zlib headers for
`sealing`) the distribution installs without it, and iqstate keeps its pure-Python path
for that job (same bytes, slower).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "iqstate_speedups.json_writer",
            ["src/iqstate_speedups/json_writer.c"],
            depends=["src/iqstate_speedups/copied_items.h"],
            optional=True,
        ),
        Extension(
            "iqstate_speedups.pairs",
            ["src/iqstate_speedups/pairs.c"],
            optional=True,
        ),
        Extension(
            "iqstate_speedups.sealing",
            ["src/iqstate_speedups/sealing.c", "src/iqstate_speedups/crc32.c"],
            depends=[
                "src/iqstate_speedups/argument_count.h",
                "src/iqstate_speedups/byte_order.h",
                "src/iqstate_speedups/copied_items.h",
                "src/iqstate_speedups/crc32.h",
                "src/iqstate_speedups/seal.h",
            ],
            libraries=["z"],
            optional=True,
        ),
        Extension(
            "iqstate_speedups.slots",
            ["src/iqstate_speedups/slots.c"],
            optional=True,
        ),
        Extension(
            "iqstate_speedups.versions",
            ["src/iqstate_speedups/versions.c", "src/iqstate_speedups/crc32.c"],
            depends=[
                "src/iqstate_speedups/argument_count.h",
                "src/iqstate_speedups/byte_order.h",
                "src/iqstate_speedups/copied_items.h",
                "src/iqstate_speedups/crc32.h",
                "src/iqstate_speedups/seal.h",
            ],
            libraries=["z"],
            optional=True,
        ),
    ]
)
