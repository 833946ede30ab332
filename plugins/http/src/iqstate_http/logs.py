"""Where `iqstate serve` writes its log lines: stderr, as text or one JSON object a line.

Every distribution logs under its own package name (`iqstate`, `iqstate_http`,
`iqstate_kafka` with librdkafka's own lines under `iqstate_kafka.client`, `iqstate_spark`,
and `uvicorn` for the HTTP server), so a level can be set per distribution with
`logging.getLogger(name).setLevel(...)`. `iqstate serve` sends all of them through one
handler: `--log-format json` writes one object per line (`time`, `level`, `logger`,
`message`, and `exception` with the traceback when there is one), for log shippers.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Literal

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonLines(logging.Formatter):
    """A log record as one line of JSON."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, str] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(log_format: LogFormat = "text", level: str = "warning") -> None:
    """Send every logger's records at `level` or above to stderr in `log_format` (the
    process's root handler: for a process that is `iqstate serve`, not for a library)."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {log_format!r}")
    if level.lower() not in LOG_LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LOG_LEVELS)}, got {level!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLines() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
