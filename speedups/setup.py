"""The C extension; everything else is in pyproject.toml.

`optional=True`: where no C compiler is found the distribution installs without it, and
iqstate keeps its pure-Python paths (same bytes, slower).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "iqstate_speedups.json_writer",
            ["src/iqstate_speedups/json_writer.c"],
            optional=True,
        )
    ]
)
