"""``rrl grade``'s grader options: ``--option KEY=VALUE`` goes to every grader of the run, ``--option
GRADER.KEY=VALUE`` to that grader only (its name as ``rrl graders list`` shows it, or its ``--grader`` spec).

Rows may route to several graders (``data_source`` defaults, ``--source-grader``, a row's ``grader`` field),
and an option one of them lacks would make every one of its rows an error; scoping the option keeps it where
it belongs, and preflight checks each grader's own options before any row is graded.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from graders.untrusted_json import JSONLimitError, UntrustedJSONError, loads_untrusted


class OptionError(ValueError):
    """A malformed ``--option`` flag."""


def option_value(text: str, flag: str) -> Any:
    """Grader options are JSON when they parse as JSON (numbers, booleans), strings otherwise; JSON past the
    limits of ``graders.untrusted_json`` (deep nesting, a huge integer) is an ``OptionError`` naming ``flag``."""
    try:
        return loads_untrusted(text)
    except JSONLimitError as exc:
        raise OptionError(f"{flag}: the value {exc}") from None
    except UntrustedJSONError:
        return text


@dataclass(frozen=True)
class GraderOptions:
    """Options for every grader (``common``) and per grader (``scoped``: grader name or spec -> options)."""

    common: dict[str, Any] = field(default_factory=dict)
    scoped: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def parse(cls, flags: Iterable[str], mode: str | None = None) -> GraderOptions:
        """From ``--option`` flags (``KEY=VALUE`` or ``GRADER.KEY=VALUE``) and ``--mode`` (a common ``mode``).

        The key is the part after the last dot, so a ``module.path:Class`` spec can scope an option too."""
        common: dict[str, Any] = {}
        scoped: dict[str, dict[str, Any]] = {}
        for item in flags:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise OptionError(f"--option: expected KEY=VALUE or GRADER.KEY=VALUE, got {item!r}")
            scope, dot, name = key.rpartition(".")
            if dot and (not scope or not name):
                raise OptionError(f"--option: expected GRADER.KEY=VALUE, got {item!r}")
            (scoped.setdefault(scope, {}) if dot else common)[name] = option_value(value, f"--option {key}")
        if mode is not None:
            common["mode"] = mode
        return cls(common, scoped)

    def for_grader(self, spec: str, name: str) -> dict[str, Any]:
        """The options a grader gets: the common ones, then those scoped to its name, then to its spec."""
        return {**self.common, **self.scoped.get(name, {}), **self.scoped.get(spec, {})}

    def unused_scopes(self, graders: dict[str, str]) -> list[str]:
        """Scopes that name none of the run's graders (``graders``: spec -> name): a typo, or a grader that no
        row routes to."""
        known = set(graders) | set(graders.values())
        return sorted(scope for scope in self.scoped if scope not in known)
