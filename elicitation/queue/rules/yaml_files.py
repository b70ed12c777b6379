"""A rule file as text: dumped as YAML for export; loaded (YAML or JSON) through `load_rule_file`, the one function
every door that takes a rule file calls (the REST rules views, the admin, `import_rules`).

Loading checks what a parser would pay for before it pays: the size, then the nesting depth, then the parse, then
the checks any JSON body gets (lone surrogates). A 36 KB file nested 6,000 deep cost 30 s of PyYAML's scanner
before the depth check that used to follow the parse; refused now, it costs about a millisecond.
"""

from collections.abc import Mapping
from typing import Any, Literal

import yaml

from elicitation.queue import untrusted_json
from elicitation.queue.errors import InvalidInput

# 5,000 rules (validation.MAX_RULES) of ~200 bytes each. REST bodies stop earlier (MAX_BODY_BYTES, 413); this is
# the bound for the admin and `import_rules`, checked before anything reads the text.
MAX_RULE_FILE_BYTES = 1024 * 1024

# libyaml (in PyYAML's wheels) when present: PyYAML's pure-Python scanner is quadratic in flow nesting (0.14 s to
# reach level 33 of `[[[…`, where libyaml takes 1 ms) and 20-50 times slower on a valid file.
YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_OPENS = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_CLOSES = (yaml.MappingEndEvent, yaml.SequenceEndEvent)


def dump_yaml(data: Mapping[str, Any]) -> str:
    return str(yaml.safe_dump(dict(data), sort_keys=False, allow_unicode=True, width=100))


def load_yaml(text: str | bytes) -> Any:
    """A YAML rule file's text as data (`load_rule_file` with YAML)."""
    return load_rule_file(text, syntax="yaml")


def load_rule_file(text: str | bytes, *, syntax: Literal["yaml", "json"]) -> Any:
    """A rule file's text as data, or InvalidInput naming `$` (or the offending field) and the reason. Refusals
    cost what the limits allow, never what the file asks for: the size is checked first, and the depth while the
    structure is read, stopping at the first level past MAX_JSON_DEPTH."""
    size = len(text) if isinstance(text, bytes) else len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_RULE_FILE_BYTES:
        raise InvalidInput(
            "The rule file is too large.",
            {"$": f"is {size} bytes; a rule file is at most {MAX_RULE_FILE_BYTES} bytes"},
        )
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    try:
        if syntax == "json":
            # Exact for JSON: its strings are unambiguous, so counting brackets outside them is the depth.
            untrusted_json.check_text_depth(text)
            data = untrusted_json.loads(text)
        else:
            _check_yaml_structure(text)
            data = yaml.load(text, Loader=YAML_LOADER)  # noqa: S506 - YAML_LOADER is a safe loader
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


def _check_yaml_structure(text: str) -> None:
    """Walk the YAML's events, refusing aliases (`*ref`, the billion-laughs door) and stopping at the first
    container past MAX_JSON_DEPTH. YAML's own scanner decides what is structure: counting brackets in the raw text
    cannot, since quotes, plain scalars (`a: x[, 'y`) and block scalars decide whether a `[` or `"` is one, and a
    count that guesses wrong can be led to see `["]",["]",…` as flat."""
    limit = untrusted_json.max_depth()
    too_deep = untrusted_json.JSONRefused("too_deep", "$", f"nested deeper than {limit} levels.")
    depth = 0
    try:
        for event in yaml.parse(text, Loader=YAML_LOADER):
            if isinstance(event, _OPENS):
                depth += 1
                if depth > limit:
                    raise too_deep
            elif isinstance(event, _CLOSES):
                depth -= 1
            elif isinstance(event, yaml.AliasEvent):
                raise untrusted_json.JSONRefused("alias", "$", "YAML aliases (*name) are not accepted")
    except yaml.scanner.ScannerError as exc:
        # libyaml looks up to 1,024 characters ahead for a key, so `[[[…` meets its own cap (1,000 levels)
        # before the parser hands over level 33: the same refusal, said the same way.
        if "maximum nesting depth" in str(exc.problem):
            raise too_deep from None
        raise
