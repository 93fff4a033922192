"""Sessions that learn: explicit commands take effect when a user message is added, and
EndSession turns the conversation into persona facts, entities, relations and an episode.

EndSession, in order:
1. reads the session's messages;
2. asks the extractor (when there is one and the request allows it) about the messages
   that are conversation, not commands. If it fails, the call fails here: nothing has
   been written and nothing cleared, and the caller ends the session again later;
3. writes what came back: facts to persona (source auto, see PersonaTier.learn), entities
   and relations to the entity tier, the summary as an episode under an id derived from
   the messages it summarises; a forget said in the session also holds for what the
   extractor found;
4. deletes the messages it read (unless `sessions.keep_messages_on_end`); messages added
   meanwhile stay for the next EndSession.
Ending a session again adds nothing: its messages are gone, or (kept) give the same
facts, entities and summary, which are all recognised as known.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence

from memoryd.core.errors import QuotaExceeded
from memoryd.core.locks import KeyedLocks
from memoryd.core.models import (
    AddCommand,
    CommandAction,
    CommandOutcome,
    EndSessionCommand,
    EndSessionResult,
    Entity,
    Episode,
    EpisodeStep,
    Lookup,
    MemoryRecord,
    Operation,
    Relation,
    Role,
    Scope,
    Source,
    Tier,
)
from memoryd.core.sessions.commands import Command, parse_command
from memoryd.core.sessions.extraction import Extraction, SessionExtractor
from memoryd.core.sessions.parts import SessionParts, parts_of
from memoryd.core.text import utf8_len
from memoryd.core.tiers.base import TierHandler
from memoryd.core.tiers.entity_records import EntityChange
from memoryd.settings import LimitSettings, SessionSettings

# Derives a session summary's episode id from the messages it summarises.
_SUMMARY_NAMESPACE = uuid.UUID("2c9e7a41-5d3b-4f6e-8a17-c40b9d2e5f83")
_ADDED = (Operation.ADD, Operation.ADD_WITH_PRUNE)


def _command_of(message: MemoryRecord) -> Command | None:
    if message.role not in (Role.USER, Role.UNSPECIFIED):
        return None  # only the user commands memory; an assistant quoting one does not
    return parse_command(message.content)


class Sessions:
    def __init__(
        self,
        parts: SessionParts,
        settings: SessionSettings,
        limits: LimitSettings,
        *,
        extractor: SessionExtractor | None = None,
    ) -> None:
        self._short_term = parts.messages
        self._persona = parts.facts
        self._entity = parts.entities
        self._episodic = parts.episodes
        self._extractor = extractor
        self._settings = settings
        self._limits = limits
        self._locks = KeyedLocks()

    @classmethod
    def wire(
        cls,
        tiers: Mapping[Tier, TierHandler],
        settings: SessionSettings,
        limits: LimitSettings,
        *,
        extractor: SessionExtractor | None = None,
    ) -> Sessions | None:
        """Sessions over the served tiers, each in the part the registry declares for it;
        None when conversation messages or persona facts are not served."""
        parts = parts_of(tiers)
        return None if parts is None else cls(parts, settings, limits, extractor=extractor)

    # ------------------------------------------------------------------ commands

    async def on_add(self, cmd: AddCommand) -> CommandOutcome | None:
        """Apply the command a user message to short-term memory holds, if any (before the
        message is stored, so an acknowledged command has taken effect)."""
        if cmd.tier is not Tier.SHORT_TERM or cmd.role not in (Role.USER, Role.UNSPECIFIED):
            return None
        command = parse_command(cmd.content)
        return None if command is None else await self.apply(cmd.scope, command)

    async def apply(self, scope: Scope, command: Command) -> CommandOutcome:
        if command.action is CommandAction.REMEMBER:
            key, value = command.fact()
            if utf8_len(key) > self._limits.max_key_bytes:
                key, value = command.fact_as_note()
            change = await self._persona.remember(scope, key, value, session_id=scope.session_id)
            return CommandOutcome(
                command.action, command.subject, [change.record], change.operation
            )
        gone = await self._persona.forget(
            scope, command.keys(), command.subject, self._settings.forget_min_score
        )
        return CommandOutcome(command.action, command.subject, gone)

    # ------------------------------------------------------------------ EndSession

    async def end(self, cmd: EndSessionCommand) -> EndSessionResult:
        scope = cmd.scope
        async with self._locks((scope.tenant, scope.user_id, scope.session_id)):
            messages = await self._short_term.messages(scope)
            result = EndSessionResult(messages_processed=len(messages))
            commands = {m.id: c for m in messages if (c := _command_of(m)) is not None}
            talk = [
                m
                for m in messages
                if m.id not in commands and m.role in (Role.USER, Role.ASSISTANT, Role.UNSPECIFIED)
            ]
            extraction: Extraction | None = None
            if not talk:
                reason = "the session holds no conversation to extract from"
            elif cmd.extract is False:
                reason = "the request asked not to extract"
            elif self._extractor is None:
                reason = "this server has no extractor (set MEMORYD_EXTRACTION__BASE_URL)"
            else:
                reason = ""
                extraction = await self._extractor.extract(talk)
            if extraction is None:
                result.extraction_skipped, result.extraction_skipped_reason = True, reason
            else:
                forgets = [c for c in commands.values() if c.action is CommandAction.FORGET]
                await self._write(scope, talk, extraction, forgets, cmd.auto_prune, result)
            if messages and not self._settings.keep_messages_on_end:
                await self._short_term.delete(
                    Lookup(scope, Tier.SHORT_TERM, ids=[m.id for m in messages])
                )
        return result

    async def _write(
        self,
        scope: Scope,
        talk: Sequence[MemoryRecord],
        extraction: Extraction,
        forgets: Sequence[Command],
        auto_prune: bool,
        result: EndSessionResult,
    ) -> None:
        result.facts_extracted = len(extraction.facts)
        result.skipped_count += extraction.dropped
        facts: dict[str, MemoryRecord] = {}
        for fact in extraction.facts:
            change = await self._persona.learn(
                scope,
                fact.key,
                fact.value,
                kind=fact.kind,
                session_id=scope.session_id,
                metadata={"confidence": f"{fact.confidence:.2f}"},
            )
            if change.operation is None:
                result.skipped_count += 1
                continue
            facts[change.record.id] = change.record
            (result.added_ids if change.operation in _ADDED else result.updated_ids).append(
                change.record.id
            )
        # The user asked in this session to forget these: the extractor, reading the whole
        # conversation, must not bring them back. The commands took effect when said, so
        # only facts written now are looked at (a fact said after a forget of its key is
        # dropped as well: a stated "remember that ..." is the way to keep it).
        for command in forgets:
            gone = await self._persona.forget(
                scope,
                command.keys(),
                command.subject,
                self._settings.forget_min_score,
                among=set(facts),
            )
            for forgotten in gone:
                facts.pop(forgotten.id, None)
                for ids in (result.added_ids, result.updated_ids):
                    if forgotten.id in ids:
                        ids.remove(forgotten.id)
                result.skipped_count += 1
        result.facts = list(facts.values())
        if self._entity is not None:
            await self._write_entities(scope, extraction, auto_prune, result)
        if self._episodic is not None and extraction.summary:
            await self._write_summary(scope, talk, extraction.summary, auto_prune, result)

    def _full(self, result: EndSessionResult, exc: QuotaExceeded) -> None:
        result.skipped_count += 1
        if str(exc) not in result.warnings:
            result.warnings.append(str(exc))

    def _count(self, change: EntityChange, result: EndSessionResult) -> None:
        result.added_ids += [r.id for r in change.created]
        if change.operation is Operation.DEDUPLICATED:
            result.skipped_count += 1
        elif change.operation is Operation.UPDATED or change.closed:
            result.updated_ids.append(change.record.id)
        else:
            result.added_ids.append(change.record.id)

    async def _write_entities(
        self, scope: Scope, extraction: Extraction, auto_prune: bool, result: EndSessionResult
    ) -> None:
        assert self._entity is not None
        for entity in extraction.entities:
            try:
                change = await self._entity.upsert_entity(
                    scope,
                    Entity(entity.name, entity.type, description=entity.description),
                    source=Source.AUTO,
                    auto_prune=auto_prune,
                    session_id=scope.session_id,
                )
            except QuotaExceeded as exc:
                self._full(result, exc)
                continue
            self._count(change, result)
        for relation in extraction.relations:
            try:
                change = await self._entity.add_relation(
                    scope,
                    Relation(relation.subject, relation.predicate, relation.object),
                    source=Source.AUTO,
                    auto_prune=auto_prune,
                    session_id=scope.session_id,
                )
            except QuotaExceeded as exc:
                self._full(result, exc)
                continue
            self._count(change, result)

    async def _write_summary(
        self,
        scope: Scope,
        talk: Sequence[MemoryRecord],
        summary: str,
        auto_prune: bool,
        result: EndSessionResult,
    ) -> None:
        assert self._episodic is not None
        # The same messages give the same id: a summary is written once.
        material = "\x00".join((scope.tenant, scope.user_id, scope.agent_id, scope.session_id))
        point_id = str(uuid.uuid5(_SUMMARY_NAMESPACE, f"{material}\x00{talk[-1].id}"))
        episode = Episode(
            task=summary,
            steps=(
                EpisodeStep(f"conversation of {len(talk)} messages in session {scope.session_id}"),
            ),
        )
        try:
            record = await self._episodic.add_summary(
                scope,
                point_id,
                episode,
                auto_prune=auto_prune,
                metadata={"origin": "session_summary"},
            )
        except QuotaExceeded as exc:
            self._full(result, exc)
            return
        if record is None:
            result.skipped_count += 1
        else:
            result.added_ids.append(record.id)
