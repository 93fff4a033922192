"""The structured bodies some memories carry: an episode (episodic tier), a JSON
document (structured tier), or an entity or relation (entity tier). Here they are
checked, rendered as the readable text that is embedded, searched and returned as
`content`, and laid out in payloads and archive entries.

A document's top-level scalar fields are also kept as strings (`document_fields`), so
Retrieve/Prune filters can match them: strings as they are, other scalars as written in
JSON (`true`, `false`, `null`, `42`, `2.5`). Only fields whose names a filter may name
are kept (`core.validation.FILTER_KEY_RULE`).
"""

from __future__ import annotations

import base64
import json
import math
import re
import zlib
from typing import Any

from memoryd.core.errors import FieldViolation
from memoryd.core.models import Entity, Episode, EpisodeStep, MemoryRecord, Relation
from memoryd.core.text import utf8_len
from memoryd.core.validation import is_filter_key
from memoryd.stores.vectors.port import field_path

# Payload field holding a document's filterable top-level scalars.
DOCUMENT_FIELDS = "document_fields"

# Deeper documents are refused: flattening walks them recursively.
MAX_DEPTH = 64


# --------------------------------------------------------------------------- episodes


def render_episode(episode: Episode) -> str:
    """Task, numbered steps and outcome as plain lines: what is embedded and returned."""
    lines = [f"Task: {episode.task}"]
    for n, step in enumerate(episode.steps, 1):
        lines.append(f"Step {n}: {step.action}")
        if step.observation:
            lines.append(f"  Observation: {step.observation}")
    # `success` has no "unset" in proto3: only a stated success is rendered.
    if episode.outcome:
        lines.append(f"Outcome{' (success)' if episode.success else ''}: {episode.outcome}")
    elif episode.success:
        lines.append("Outcome: success")
    return "\n".join(lines)


def episode_problems(
    episode: Episode | None, max_steps: int, max_bytes: int, field: str = "episode"
) -> list[FieldViolation]:
    """What is wrong with an episode, each problem naming its field (`episode.steps`...)."""
    if episode is None:
        return [FieldViolation(field, "is required for the episodic tier")]
    problems: list[FieldViolation] = []
    if not episode.task.strip():
        problems.append(FieldViolation(f"{field}.task", "must not be empty"))
    if not 1 <= len(episode.steps) <= max_steps:
        problems.append(
            FieldViolation(
                f"{field}.steps", f"needs 1..{max_steps} steps; got {len(episode.steps)}"
            )
        )
    for i, step in enumerate(episode.steps[:max_steps]):
        if not step.action.strip():
            problems.append(FieldViolation(f"{field}.steps[{i}].action", "must not be empty"))
    if not problems and (size := utf8_len(render_episode(episode))) > max_bytes:
        problems.append(
            FieldViolation(field, f"is {size:,} bytes once rendered; the limit is {max_bytes:,}")
        )
    return problems


def episode_to_dict(episode: Episode) -> dict[str, Any]:
    return {
        "task": episode.task,
        "steps": [{"action": s.action, "observation": s.observation} for s in episode.steps],
        "outcome": episode.outcome,
        "success": episode.success,
    }


def episode_from_dict(data: Any) -> Episode | None:
    if not isinstance(data, dict):
        return None
    return Episode(
        task=str(data.get("task", "")),
        steps=tuple(
            EpisodeStep(str(s.get("action", "")), str(s.get("observation", "")))
            for s in data.get("steps") or []
        ),
        outcome=str(data.get("outcome", "")),
        success=bool(data.get("success", False)),
    )


# --------------------------------------------------------------------------- documents


class _NotStrictJson(ValueError):
    """A number other languages' strict JSON parsers refuse (Python's accepts it)."""


def _no_constant(name: str) -> Any:
    raise _NotStrictJson(f"holds {name}, which is not JSON (strict parsers refuse it)")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _NotStrictJson("holds a number beyond a 64-bit float (e.g. 1e999)")
    return value


# Digits past which an integer is beyond a 64-bit float (1.8e308); checked before int(),
# which refuses long digit strings with a message about Python itself.
_MAX_INT_DIGITS = 310


def _float_sized_int(text: str) -> int:
    too_big = _NotStrictJson("holds a number beyond a 64-bit float (e.g. 1e999)")
    if len(text) > _MAX_INT_DIGITS:
        raise too_big
    value = int(text)
    try:
        float(value)
    except OverflowError:
        raise too_big from None
    return value


def parse_document(text: str, *, strict: bool = False) -> dict[str, Any]:
    """The JSON object in `text`; ValueError saying what is wrong otherwise. `strict`
    (new documents) also refuses what Python reads but other parsers do not: NaN,
    Infinity and numbers no 64-bit float holds. Stored documents are read as they are."""
    try:
        if strict:
            document = json.loads(
                text,
                parse_constant=_no_constant,
                parse_float=_finite_float,
                parse_int=_float_sized_int,
            )
        else:
            document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except RecursionError:
        raise ValueError("is nested too deeply") from None
    if not isinstance(document, dict):
        raise ValueError(f"must be a JSON object, not {type(document).__name__}")
    if not document:
        raise ValueError("must hold at least one field")
    if _deeper_than(document, MAX_DEPTH):
        raise ValueError(f"is nested deeper than {MAX_DEPTH} levels")
    try:
        json.dumps(document, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        # JSON may escape half of a surrogate pair (`"\ud800"`); Python decodes it to a
        # string no UTF-8 store or response can carry.
        raise ValueError(
            "holds a lone surrogate escape (\\ud800-\\udfff without its pair): not Unicode text"
        ) from None
    return document


def _deeper_than(value: Any, levels: int) -> bool:
    if not isinstance(value, dict | list):
        return False
    if levels == 0:
        return True
    children = value.values() if isinstance(value, dict) else value
    return any(_deeper_than(child, levels - 1) for child in children)


def document_problems(text: str, max_bytes: int, field: str = "document_json") -> list[str]:
    """What is wrong with a document (empty list when nothing is)."""
    if not text.strip():
        return ["is required for the structured tier: a JSON object"]
    if (size := utf8_len(text)) > max_bytes:
        return [f"is {size:,} bytes; the limit is {max_bytes:,}"]
    try:
        document = parse_document(text, strict=True)
    except ValueError as exc:
        return [str(exc)]
    if (flat := utf8_len(flatten_document(document))) > max_bytes:
        return [f"is {flat:,} bytes once flattened to text; the limit is {max_bytes:,}"]
    return []


def _scalar(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _flatten(value: Any, path: str, out: list[str]) -> None:
    if isinstance(value, dict):
        if not value:
            out.append(f"{path}: {{}}")
        for key, item in value.items():
            _flatten(item, f"{path}.{key}" if path else str(key), out)
    elif isinstance(value, list):
        if all(not isinstance(v, dict | list) for v in value):
            out.append(f"{path}: {', '.join(_scalar(v) for v in value)}")
        else:
            for i, item in enumerate(value):
                _flatten(item, f"{path}[{i}]", out)
    else:
        out.append(f"{path}: {_scalar(value)}")


def flatten_document(document: dict[str, Any]) -> str:
    """One `path: value` line per leaf (`address.city: Lyon`, `tags: a, b`): readable
    text for embedding, keyword search and prompts."""
    out: list[str] = []
    _flatten(document, "", out)
    return "\n".join(out)


def document_fields(document: dict[str, Any]) -> dict[str, str]:
    """The top-level scalar fields a filter can match, as strings."""
    return {
        key: _scalar(value)
        for key, value in document.items()
        if is_filter_key(key) and not isinstance(value, dict | list)
    }


def field_filter_key(name: str) -> str:
    return field_path(DOCUMENT_FIELDS, name)


# --------------------------------------------------------------------------- entities

# Payload fields of the entity tier: an entity's name keys (its name and aliases), and a
# relation's ends (the keys of the entities it links) and validity.
NAMES_FIELD = "names"
SUBJECT_KEY = "subject_key"
OBJECT_KEY = "object_key"
PREDICATE_KEY = "predicate_key"
VALID_FROM = "valid_from"
INVALID_AT = "invalid_at"

MAX_ALIASES = 32
MAX_TYPE_BYTES = 64
_WORD_SEPARATORS = re.compile(r"[\s\-]+")


def name_key(name: str) -> str:
    """The identity of an entity name: case and spacing aside ("Acme  Corp" = "acme corp")."""
    return " ".join(name.split()).casefold()


def predicate_key(predicate: str) -> str:
    """A predicate's identity: "Works at" and "works_at" are the same predicate."""
    return "_".join(p for p in _WORD_SEPARATORS.split(predicate.strip().casefold()) if p)


def render_entity(entity: Entity) -> str:
    """`Name (type): description`, then its aliases: what is embedded and returned."""
    head = f"{entity.name} ({entity.type})" if entity.type else entity.name
    lines = [f"{head}: {entity.description}" if entity.description else head]
    if entity.aliases:
        lines.append(f"Also known as: {', '.join(entity.aliases)}")
    return "\n".join(lines)


def render_relation(relation: Relation) -> str:
    """ "Ana works at Acme": the predicate's underscores read as spaces."""
    return f"{relation.subject} {relation.predicate.replace('_', ' ')} {relation.object}"


def _name_problems(field: str, value: str, max_bytes: int, what: str = "") -> list[FieldViolation]:
    if not value.strip():
        return [FieldViolation(field, f"must not be empty{what}")]
    if utf8_len(value) > max_bytes:
        return [FieldViolation(field, f"is over {max_bytes} bytes")]
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        return [FieldViolation(field, "must not contain control characters")]
    return []


def entity_problems(
    entity: Entity, max_name_bytes: int, max_bytes: int, field: str = "entity"
) -> list[FieldViolation]:
    problems = _name_problems(f"{field}.name", entity.name, max_name_bytes)
    if utf8_len(entity.type) > MAX_TYPE_BYTES:
        problems.append(FieldViolation(f"{field}.type", f"is over {MAX_TYPE_BYTES} bytes"))
    if len(entity.aliases) > MAX_ALIASES:
        problems.append(FieldViolation(f"{field}.aliases", f"at most {MAX_ALIASES} aliases"))
    for i, alias in enumerate(entity.aliases[:MAX_ALIASES]):
        problems += _name_problems(f"{field}.aliases[{i}]", alias, max_name_bytes)
    if not problems and (size := utf8_len(render_entity(entity))) > max_bytes:
        problems.append(
            FieldViolation(field, f"is {size:,} bytes once rendered; the limit is {max_bytes:,}")
        )
    return problems


def relation_problems(
    relation: Relation, max_name_bytes: int, field: str = "relation"
) -> list[FieldViolation]:
    problems: list[FieldViolation] = []
    for part in ("subject", "predicate", "object"):
        problems += _name_problems(f"{field}.{part}", getattr(relation, part), max_name_bytes)
    if problems == [] and not predicate_key(relation.predicate):
        problems.append(FieldViolation(f"{field}.predicate", "must hold a word"))
    start, end = relation.valid_from, relation.invalid_at
    if start is not None and end is not None and end <= start:
        problems.append(FieldViolation(f"{field}.invalid_at", "must be after valid_from"))
    return problems


def entity_to_dict(entity: Entity) -> dict[str, Any]:
    return {
        "name": entity.name,
        "type": entity.type,
        "aliases": list(entity.aliases),
        "description": entity.description,
    }


def entity_of(payload: dict[str, Any]) -> Entity | None:
    data = payload.get("entity")
    if not isinstance(data, dict):
        return None
    return Entity(
        name=str(data.get("name", "")),
        type=str(data.get("type", "")),
        aliases=tuple(str(a) for a in data.get("aliases") or []),
        description=str(data.get("description", "")),
    )


def relation_of(payload: dict[str, Any]) -> Relation | None:
    data = payload.get("relation")
    if not isinstance(data, dict):
        return None
    start, end = payload.get(VALID_FROM), payload.get(INVALID_AT)
    return Relation(
        subject=str(data.get("subject", "")),
        predicate=str(data.get("predicate", "")),
        object=str(data.get("object", "")),
        valid_from=float(start) if start is not None else None,
        invalid_at=float(end) if end is not None else None,
    )


def _entity_payload(record: MemoryRecord) -> dict[str, Any]:
    payload: dict[str, Any] = {}
    if record.entity is not None:
        entity = record.entity
        payload["entity"] = entity_to_dict(entity)
        payload[NAMES_FIELD] = list(
            dict.fromkeys(name_key(n) for n in (entity.name, *entity.aliases))
        )
    if record.relation is not None:
        relation = record.relation
        payload["relation"] = {
            "subject": relation.subject,
            "predicate": relation.predicate,
            "object": relation.object,
        }
        payload[SUBJECT_KEY] = name_key(relation.subject)
        payload[OBJECT_KEY] = name_key(relation.object)
        payload[PREDICATE_KEY] = predicate_key(relation.predicate)
        payload[VALID_FROM] = (
            relation.valid_from if relation.valid_from is not None else record.created_at
        )
        if relation.invalid_at is not None:
            payload[INVALID_AT] = relation.invalid_at
    return payload


# --------------------------------------------------------------------------- payloads


def body_payload(record: MemoryRecord, compress_over_bytes: int) -> dict[str, Any]:
    """Payload fields of the record's episode, document, entity or relation (none for
    other memories).
    A document's `size` is its JSON's bytes: what the structured tier's quota counts."""
    payload: dict[str, Any] = {}
    if record.episode is not None:
        payload["episode"] = episode_to_dict(record.episode)
    if record.document_json:
        raw = record.document_json.encode("utf-8")
        payload["size"] = len(raw)
        if len(raw) > compress_over_bytes:
            payload["document_z"] = base64.b64encode(zlib.compress(raw, level=6)).decode("ascii")
        else:
            payload["document_json"] = record.document_json
        try:
            payload[DOCUMENT_FIELDS] = document_fields(parse_document(record.document_json))
        except ValueError:
            payload[DOCUMENT_FIELDS] = {}  # checked before any write; never filterable
    payload.update(_entity_payload(record))
    return payload


def episode_of(payload: dict[str, Any]) -> Episode | None:
    return episode_from_dict(payload.get("episode"))


def document_of(payload: dict[str, Any]) -> str:
    if "document_z" in payload:
        return zlib.decompress(base64.b64decode(payload["document_z"])).decode("utf-8")
    return str(payload.get("document_json", ""))
