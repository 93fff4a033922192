"""The storage survey reads every stored memory: at millions that is minutes of work that
starts with the server, so it pauses after each page and leaves the process to requests."""

from __future__ import annotations

from memoryd.app import App
from memoryd.core.lifecycle.maintenance import Maintenance
from memoryd.core.memory.vector_memory import PAGE_SIZE
from memoryd.core.models import AddCommand, Scope, Tier
from memoryd.settings import RetentionSettings
from tests.unit.unit_kit import AppFactory

ME = Scope(tenant="t1", user_id="alice")
PAGES = 2


async def _pauses_of_a_survey(make_app: AppFactory, share: float) -> list[float]:
    """The pauses a survey of PAGES pages of long-term memories makes, given `share`."""
    app: App = await make_app()
    count = PAGE_SIZE * (PAGES - 1) + 1
    items = [AddCommand(scope=ME, tier=Tier.LONG_TERM, content=f"note {i}") for i in range(count)]
    for start in range(0, count, 100):
        await app.engine.add_batch(items[start : start + 100])
    pauses: list[float] = []

    async def sleep(seconds: float) -> None:
        pauses.append(seconds)

    settings = RetentionSettings(survey_share=share)
    await Maintenance(app.memory, app.engine.tiers, settings, sleep=sleep).survey()
    return pauses


async def test_the_survey_pauses_after_each_page_in_proportion_to_its_work(
    make_app: AppFactory,
) -> None:
    # One pause per page of long-term memories (the other vector tiers are empty): three
    # times the page's work, so the survey's work is a quarter of its time.
    pauses = await _pauses_of_a_survey(make_app, 0.25)
    assert len(pauses) == PAGES and all(p > 0 for p in pauses)


async def test_a_survey_given_the_whole_process_never_pauses(make_app: AppFactory) -> None:
    assert await _pauses_of_a_survey(make_app, 1.0) == []
