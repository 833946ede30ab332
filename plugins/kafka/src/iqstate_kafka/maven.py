"""Jars from Maven Central, fetched once with `mvn` into iqstate's cache.

The test broker's jars (`iqstate_kafka.testing`) and Spark's Kafka connector
(`iqstate_spark.connector`) come this way: a one-dependency `pom.xml` in
`<cache>/<folder>/`, Maven's `copy-dependencies` into `lib/`, and a finished folder reused
without running Maven again.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from iqstate_kafka.errors import ClusterError


class MavenError(ClusterError):
    """Jars could not be fetched from Maven Central."""


_DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
_COMPLETE = ".complete"
_OUTPUT_TAIL_LINES = 40

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>iqstate.local</groupId>
  <artifactId>classpath</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>{group}</groupId>
      <artifactId>{artifact}</artifactId>
      <version>{version}</version>
    </dependency>
  </dependencies>
</project>
"""


def cache_root() -> Path:
    """`$IQSTATE_CACHE_DIR`, else `$XDG_CACHE_HOME/iqstate`, else `~/.cache/iqstate`."""
    explicit = os.environ.get("IQSTATE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "iqstate"


def maven_jars(
    group: str,
    artifact: str,
    version: str,
    folder_name: str,
    cache: Path | None = None,
    what: str | None = None,
) -> Path:
    """The folder of `group:artifact:version`'s jar and its runtime dependencies, fetched
    from Maven Central with `mvn` the first time into `<cache>/<folder_name>/lib` (a
    one-dependency `pom.xml`; a finished folder is reused without running Maven again).

    Concurrent callers wait on a lock file; only one runs Maven. `MavenError`, with Maven's
    last lines, when the artifact cannot be fetched.
    """
    what = what or f"{group}:{artifact}"
    folder = (cache or cache_root()) / folder_name
    lib = folder / "lib"
    if (lib / _COMPLETE).exists():
        return lib
    folder.mkdir(parents=True, exist_ok=True)
    with _locked(folder / ".lock"):
        if (lib / _COMPLETE).exists():
            return lib
        mvn = shutil.which("mvn")
        if mvn is None:
            raise MavenError(
                f"mvn (Apache Maven) is not on PATH: it fetches {what}'s jars from Maven "
                "Central (install it, e.g. apt-get install maven)"
            )
        pom = _POM.format(group=group, artifact=artifact, version=version)
        (folder / "pom.xml").write_text(pom, encoding="utf-8")
        staging = folder / "lib.partial"
        shutil.rmtree(staging, ignore_errors=True)
        command = [
            mvn,
            "-q",
            "-B",
            f"{_DEPENDENCY_PLUGIN}:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={staging}",
        ]
        done = subprocess.run(command, cwd=folder, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not any(staging.glob(f"{artifact}-*.jar")):
            output = last_lines((done.stdout + done.stderr).splitlines())
            raise MavenError(
                f"could not fetch {what} {version} with Maven (exit {done.returncode}) "
                f"in {folder}:\n{output}"
            )
        (staging / _COMPLETE).touch()
        shutil.rmtree(lib, ignore_errors=True)
        staging.rename(lib)
    return lib


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def last_lines(lines: list[str]) -> str:
    """The end of a process's output, for an error message."""
    return "\n".join(lines[-_OUTPUT_TAIL_LINES:]) or "(no output)"
