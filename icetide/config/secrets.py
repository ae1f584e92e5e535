"""Secrets in settings: which names hold one, redaction of their values, `${ENV_VAR}` expansion.

A setting is secret when its name says so (`is_secret_name`). Its value is shown as `***` in
reprs, logs and the CLI's output. Every value icetide has seen under a secret name is also
remembered (`remember_secret`), so `scrub` can remove it from any text that carries it by
value, such as a Java error message or a log line about a URL; the CLI installs
`RedactingFilter` on its log handlers for that.

A value may also carry a secret inside a URI, whatever its setting's name (`uri:
jdbc:postgresql://host/db?user=u&password=p`, `http://user:pass@host`): `redact` masks the
password of a URI's user info and the value of each secret-named query parameter, and remembers
them.

Names are split into words at `.`, `_`, `-` and camelCase boundaries, case-insensitively:

- a name containing `secret`, `password`, `passwd`, `token`, `credential` or `user.info` is
  secret (`basic.auth.user.info`, `sasl.password`, `ssl.key.password`, `s3.secret-access-key`, `token`, `credential`,
  `sasl.oauthbearer.client.secret`, `accessToken`);
- a word that is or ends in `key` makes a name secret (`s3.access-key-id`, `api_key`,
  `ssl.key.pem`, `fs.azure.account.key.<account>...`), except as the first word (`key`,
  `key.deserializer`: Kafka's record key) or when the next word names something about the key
  rather than the key itself (`ssl.key.location`, `...key.type`, `...key.serializer`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import threading
from collections.abc import Mapping
from typing import Any

from icetide.errors import ConfigError

REDACTED = "***"
# `user.info`: a Schema Registry's `basic.auth.user.info` (user:password).
_SECRET_PARTS = ("secret", "password", "passwd", "token", "credential", "user.info", "userinfo")
# Words after `key` that describe the key (a path, a format) rather than hold it.
_ABOUT_THE_KEY = frozenset(
    {"location", "type", "format", "algorithm", "alias", "provider", "serializer", "deserializer", "columns", "fields"}
)
_WORD_BREAK = re.compile(r"[._\-\s/:]+|(?<=[a-z0-9])(?=[A-Z])")
_ENV = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*?))?\}")
_URI_USERINFO = re.compile(r"(?<=://)([^/?#@:\s]*):([^/?#@\s]+)@")
_URI_PARAM = re.compile(r"([?&;])([^=&;#\s]+)=([^&;#\s]*)")
_MIN_SCRUB_LENGTH = 4  # shorter values (`1`, `abc`) would blank out ordinary text

_known: set[str] = set()
_known_lock = threading.Lock()


def is_secret_name(name: str) -> bool:
    """Does a setting of this name hold a secret (see the module docstring for the rule)?"""
    lowered = name.lower()
    if any(part in lowered for part in _SECRET_PARTS):
        return True
    words = [w.lower() for w in _WORD_BREAK.split(name) if w]
    for i, word in enumerate(words):
        if i == 0 or not word.endswith("key"):
            continue
        following = words[i + 1] if i + 1 < len(words) else None
        if following not in _ABOUT_THE_KEY:
            return True
    return False


def remember_secret(value: Any) -> None:
    """Remember a secret value, so `scrub` removes it from any text later."""
    text = str(value)
    if len(text) >= _MIN_SCRUB_LENGTH:
        with _known_lock:
            _known.add(text)


def redact_uri(text: str) -> str:
    """`text` with the credentials inside any URI in it masked: the password of
    `scheme://user:password@host` and the values of secret-named query parameters
    (`?password=...`, `&token=...`). The values masked are remembered for `scrub`."""
    if "://" not in text and "=" not in text:
        return text

    def userinfo(match: re.Match[str]) -> str:
        remember_secret(match.group(2))
        return f"{match.group(1)}:{REDACTED}@"

    def param(match: re.Match[str]) -> str:
        sep, name, value = match.groups()
        if not value or not is_secret_name(name):
            return match.group(0)
        remember_secret(value)
        return f"{sep}{name}={REDACTED}"

    return _URI_PARAM.sub(param, _URI_USERINFO.sub(userinfo, text))


def redact(settings: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `settings` with every secret-named value replaced by `***`, nested mappings too,
    and the credentials inside URI values masked (`redact_uri`).

    The values replaced are remembered for `scrub`.
    """
    out: dict[str, Any] = {}
    for name, value in settings.items():
        if isinstance(value, Mapping):
            out[name] = redact(value)
        elif is_secret_name(str(name)) and value not in (None, ""):
            remember_secret(value)
            out[name] = REDACTED
        elif isinstance(value, str):
            out[name] = redact_uri(value)
        else:
            out[name] = value
    return out


def scrub(text: str) -> str:
    """`text` with every remembered secret value replaced by `***`."""
    with _known_lock:
        known = sorted(_known, key=len, reverse=True)  # a secret inside a longer one: the longer first
    for value in known:
        if value in text:
            text = text.replace(value, REDACTED)
    return text


def redacted_repr(obj: Any) -> str:
    """A dataclass repr with secret settings (at any depth of its mapping fields) shown as `***`.

    Assign it as `__repr__` in a dataclass body: `dataclass` keeps a `__repr__` the class defines.
    """
    parts = []
    for f in dataclasses.fields(obj):
        if not f.repr:
            continue
        value = getattr(obj, f.name)
        if isinstance(value, Mapping):
            value = redact(value)
        parts.append(f"{f.name}={value!r}")
    return f"{type(obj).__name__}({', '.join(parts)})"


class RedactingFilter(logging.Filter):
    """A logging filter that scrubs remembered secret values from every record it passes.

    Install it on handlers (a filter on a logger does not see its children's records).
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = scrub(message)
        if record.exc_info and record.exc_info[1] is not None:
            # The formatted trace carries exception messages too: format it once, scrubbed.
            record.exc_text = scrub(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        if clean != message or record.args:
            record.msg, record.args = clean, None
        return True


def install_log_redaction() -> None:
    """Scrub remembered secrets from every record the root logger's handlers emit."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())


def expand_env(document: Any, *, environ: Mapping[str, str] | None = None, where: str = "") -> Any:
    """A parsed YAML document with `${VAR}` and `${VAR:-default}` in its strings replaced.

    `$$` is a literal `$`. An unset variable without a default raises ConfigError naming the key
    and the variable; one set to the empty string expands to it. Values expanded under a
    secret-named key are remembered for `scrub`.
    """
    env = os.environ if environ is None else environ
    if isinstance(document, Mapping):
        return {k: expand_env(v, environ=env, where=f"{where}.{k}" if where else str(k)) for k, v in document.items()}
    if isinstance(document, list):
        return [expand_env(v, environ=env, where=f"{where}[{i}]") for i, v in enumerate(document)]
    if not isinstance(document, str) or "$" not in document:
        return document

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, default = match.group(1), match.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default
        raise ConfigError(
            f"{where or 'pipeline file'}: environment variable {name} is not set "
            f"(export it, or write ${{{name}:-default}})"
        )

    expanded = _ENV.sub(substitute, document)
    if expanded != document and is_secret_name(where.rsplit(".", 1)[-1]):
        remember_secret(expanded)
    return expanded
