"""A rule file as YAML text: dumped for export, loaded (aliases refused, the same checks as any JSON body) for
import."""

from collections.abc import Mapping
from typing import Any

import yaml

from elicitation.queue import untrusted_json
from elicitation.queue.errors import InvalidInput


def dump_yaml(data: Mapping[str, Any]) -> str:
    return str(yaml.safe_dump(dict(data), sort_keys=False, allow_unicode=True, width=100))


def load_yaml(text: str) -> Any:
    """A rule file's text as data. YAML syntax errors name the line; aliases (`*ref`, the billion-laughs door)
    are refused, and the result passes the same checks as any JSON body (depth, lone surrogates)."""
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent):
                raise InvalidInput(
                    "The rule file is not valid.", {"$": "YAML aliases (*name) are not accepted"}
                )
        data = yaml.safe_load(text)
        untrusted_json.check(data)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "the file"
        raise InvalidInput("The rule file is not valid YAML.", {"$": f"YAML error at {where}"}) from None
    except RecursionError:
        raise InvalidInput("The rule file is not valid.", {"$": "nested too deeply"}) from None
    except untrusted_json.JSONRefused as refused:
        raise InvalidInput("The rule file is not valid.", {refused.path or "$": refused.reason}) from None
    return data
