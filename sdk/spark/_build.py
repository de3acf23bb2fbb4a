"""Build the JVM client jar with ``javac`` and ``jar`` against Spark's jars, and cache it.

The Java sources are ``clients/jvm/src/main/java`` of a source checkout, or the copy this
package ships (``croupier/spark/jvm/src/main/java``) when installed from a wheel. The jar is
cached under ``$CROUPIER_CACHE_DIR`` (default ``~/.cache/croupier``)
``/spark/<key>/croupier-client.jar``, where the key hashes the sources and the Spark version, so
a new checkout or another Spark builds a new jar and an unchanged one is built once.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

__all__ = [
    "BuildError",
    "compile_jar",
    "jar_path",
    "java_sources",
    "spark_jars_dir",
    "spark_version",
]

JAR_NAME = "croupier-client.jar"
_BLAKE3_CLASS = "org/apache/commons/codec/digest/Blake3.class"
_BLOCKING_CLASS = "org/apache/spark/shuffle/BlockingShuffleManager.class"
#: the shuffle manager for Spark 4.3 and later: it implements an interface Spark 4.0-4.2 lack
BLOCKING_SOURCE = "io/croupier/spark/CroupierBlockingShuffleManager.java"
_SPARK_CORE = re.compile(r"^spark-core_[0-9.]+-(.+)\.jar$")


class BuildError(RuntimeError):
    """The jar cannot be built here; the message says what is missing and what to do."""


def java_sources() -> Path:
    """The folder of the client's Java sources (``.../src/main/java``)."""
    here = Path(__file__).resolve()  # strict editable installs link back into the checkout
    for candidate in (here.parents[2] / "clients" / "jvm", here.parent / "jvm"):
        src = candidate / "src" / "main" / "java"
        if src.is_dir():
            return src
    raise BuildError(f"the Java sources of the Croupier client are missing (looked next to {here})")


def spark_jars_dir(spark_jars: Path | None = None) -> Path:
    """``spark_jars``, else ``$SPARK_HOME/jars``, else the installed pyspark's ``jars/``."""
    if spark_jars is None:
        home = os.environ.get("SPARK_HOME")
        if home:
            spark_jars = Path(home) / "jars"
        else:
            try:
                import pyspark
            except ImportError as exc:
                raise BuildError(
                    "no Spark jars: set SPARK_HOME, or pip install pyspark (the test extra has it)"
                ) from exc
            spark_jars = Path(pyspark.__file__).parent / "jars"
    if not spark_jars.is_dir() or not any(spark_jars.glob("*.jar")):
        raise BuildError(f"no Spark jars in {spark_jars}")
    return spark_jars


def spark_version(spark_jars: Path) -> str:
    """The Spark version of a jars folder, from its ``spark-core_<scala>-<version>.jar``."""
    for jar in sorted(spark_jars.glob("spark-core_*.jar")):
        match = _SPARK_CORE.match(jar.name)
        if match:
            return match.group(1)
    raise BuildError(f"{spark_jars} has no spark-core jar: is it a Spark distribution's jars/ folder?")


def _check_blake3(spark_jars: Path) -> None:
    """commons-codec with ``Blake3`` (1.16 and later) must be among the jars."""
    for jar in sorted(spark_jars.glob("commons-codec-*.jar")):
        with zipfile.ZipFile(jar) as zf:
            if _BLAKE3_CLASS in zf.namelist():
                return
    raise BuildError(
        f"{spark_jars} has no commons-codec with org.apache.commons.codec.digest.Blake3 (1.16 or later):"
        " the Croupier client needs it for its digests (Spark 4.x ships commons-codec 1.17+)"
    )


def _tool(name: str) -> str:
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / name) if home and (Path(home) / "bin" / name).exists() else None
    found = found or shutil.which(name)
    if found is None:
        raise BuildError(
            f"`{name}` is not on PATH: building the Croupier client jar needs a JDK 17 or later"
            " (apt-get install openjdk-17-jdk-headless), not only a JRE"
        )
    return found


def _source_files(src: Path, exclude: frozenset[str] = frozenset()) -> list[Path]:
    return sorted(
        p for p in src.rglob("*.java") if p.is_file() and p.relative_to(src).as_posix() not in exclude
    )


def excluded_sources(spark_jars: Path) -> frozenset[str]:
    """Sources this Spark cannot compile: ``CroupierBlockingShuffleManager`` where spark-core has
    no ``BlockingShuffleManager`` (Spark 4.0-4.2, which use ``CroupierShuffleManager``)."""
    for jar in sorted(spark_jars.glob("spark-core_*.jar")):
        try:
            with zipfile.ZipFile(jar) as zf:
                if _BLOCKING_CLASS in zf.namelist():
                    return frozenset()
        except zipfile.BadZipFile:
            continue
    return frozenset({BLOCKING_SOURCE})


def _key(src: Path, version: str) -> str:
    digest = hashlib.sha256(version.encode())
    for path in _source_files(src):
        digest.update(str(path.relative_to(src)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:20]


def compile_jar(src: Path, classpath: list[str], out: Path, exclude: frozenset[str] = frozenset()) -> Path:
    """Compile every ``.java`` under ``src`` but ``exclude`` (paths relative to ``src``) with
    ``javac --release 17``, and pack ``out`` with ``jar``.

    Raises:
        BuildError: no JDK, or javac failed (its output is in the message).
    """
    javac, jar = _tool("javac"), _tool("jar")
    sources = _source_files(src, exclude)
    if not sources:
        raise BuildError(f"no .java files under {src}")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="croupier-javac-") as tmp:
        classes = Path(tmp) / "classes"
        listing = Path(tmp) / "sources.txt"
        listing.write_text("\n".join(f'"{p}"' for p in sources) + "\n")
        cmd = [javac, "--release", "17", "-encoding", "UTF-8", "-nowarn", "-d", str(classes)]
        cmd += ["-cp", os.pathsep.join(classpath), f"@{listing}"] if classpath else [f"@{listing}"]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise BuildError(f"javac failed ({done.returncode}):\n{done.stdout}{done.stderr}")
        partial = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        packed = subprocess.run(
            [jar, "cf", str(partial), "-C", str(classes), "."], capture_output=True, text=True, check=False
        )
        if packed.returncode != 0:
            raise BuildError(f"jar failed ({packed.returncode}):\n{packed.stdout}{packed.stderr}")
        os.replace(partial, out)  # atomic: concurrent builders of one key agree
    return out


def cache_root() -> Path:
    """Where built jars are kept: ``$CROUPIER_CACHE_DIR``, else ``$XDG_CACHE_HOME/croupier``."""
    explicit = os.environ.get("CROUPIER_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "croupier"


def jar_path(spark_jars: Path | None = None) -> Path:
    """The client jar for this Spark, built with javac (about 5 s) when not cached yet. Built
    against Spark 4.0-4.2 it leaves out ``CroupierBlockingShuffleManager`` (``excluded_sources``);
    built against 4.3 it holds both managers and runs on 4.0-4.2 too (with the plain one).

    Raises:
        BuildError: no Spark jars, no commons-codec ``Blake3`` among them, no JDK, or javac failed.
    """
    jars = spark_jars_dir(spark_jars)
    version = spark_version(jars)
    src = java_sources()
    out = cache_root() / "spark" / f"{version}-{_key(src, version)}" / JAR_NAME
    if out.is_file():
        return out
    _check_blake3(jars)
    return compile_jar(src, [str(jars / "*")], out, excluded_sources(jars))
