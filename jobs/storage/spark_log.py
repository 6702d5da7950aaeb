"""The Spark driver JVM's log configuration: Log4j 2 properties a driver starts with (through
``-Dlog4j2.configurationFile``, :func:`jobs.storage.spark.driver_java_options`)."""

from __future__ import annotations

import os
from pathlib import Path

from jobs.settings import Settings

#: The JVM's log: everything to ``<log_dir>/spark.log``; the console shows only what is at least
#: ``JOINSHIFT_SPARK_CONSOLE_LEVEL`` (default ERROR: a successful run prints no WARN noise; ``-v``
#: sets WARN).
_LOG4J2 = """status = error
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
appender.console.filter.threshold.type = ThresholdFilter
appender.console.filter.threshold.level = {console}
appender.file.type = File
appender.file.name = file
appender.file.fileName = {file}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
rootLogger.level = warn
rootLogger.appenderRef.console.ref = console
rootLogger.appenderRef.file.ref = file
logger.jetty.name = org.sparkproject.jetty
logger.jetty.level = warn
"""


def log4j_config(s: Settings, name: str = "spark") -> str:
    """Write the JVM's logging configuration (to ``<log_dir>/<name>.log``) under the log dir;
    return its path."""
    Path(s.log_dir).mkdir(parents=True, exist_ok=True)
    path = Path(s.log_dir) / f"log4j2-{name}.properties"
    console = os.environ.get("JOINSHIFT_SPARK_CONSOLE_LEVEL", "error").lower()
    path.write_text(_LOG4J2.format(console=console, file=Path(s.log_dir) / f"{name}.log"))
    return str(path)
