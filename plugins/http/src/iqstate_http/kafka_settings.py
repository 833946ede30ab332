"""`iqstate serve --cluster`'s Kafka client settings: `--kafka-config FILE` and `-X key=value`.

The settings are librdkafka's, as every Kafka tool takes them (`security.protocol`,
`sasl.mechanism`, `ssl.ca.location`, ...): a properties file of `key=value` lines (`#` and
`!` start comments; `key: value` works too), then each `-X key=value`, later ones winning.
They go to every client iqstate makes (`KafkaCluster(client_config=...)`).
"""

from __future__ import annotations

from pathlib import Path


class KafkaSettingError(ValueError):
    """A setting that cannot be read; the message names the file and line, or the flag."""


def _pair(text: str, where: str) -> tuple[str, str]:
    for separator in ("=", ":"):
        key, found, value = text.partition(separator)
        if found and key.strip():
            return key.strip(), value.strip()
    raise KafkaSettingError(f"{where}: expected key=value, got {text!r}")


def read_properties(path: str) -> dict[str, str]:
    """The settings of a properties file; `KafkaSettingError` naming what is wrong."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise KafkaSettingError(f"--kafka-config {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise KafkaSettingError(f"--kafka-config {path}: not UTF-8 text ({exc})") from exc
    settings: dict[str, str] = {}
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text or text[0] in "#!":
            continue
        key, value = _pair(text, f"--kafka-config {path}, line {number}")
        settings[key] = value
    return settings


def kafka_settings(config_file: str | None, pairs: list[str]) -> dict[str, str]:
    """The file's settings, then each `-X key=value` over them."""
    settings = {} if config_file is None else read_properties(config_file)
    for text in pairs:
        key, value = _pair(text, "-X")
        settings[key] = value
    return settings
