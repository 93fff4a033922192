"""Explicit remember/forget commands: what opens one, what it is about, and the plain
messages that must never be taken for one."""

from __future__ import annotations

import pytest

from memoryd.core.models import CommandAction
from memoryd.core.sessions.commands import parse_command

REMEMBER, FORGET = CommandAction.REMEMBER, CommandAction.FORGET


@pytest.mark.parametrize(
    ("message", "action", "subject"),
    [
        ("remember that I prefer TypeScript", REMEMBER, "I prefer TypeScript"),
        ("Remember that my name is Ana.", REMEMBER, "my name is Ana"),
        ("please remember I'm vegetarian", REMEMBER, "I'm vegetarian"),
        ("Please, remember: editor: Neovim", REMEMBER, "editor: Neovim"),
        ("remember: I work remotely on Fridays", REMEMBER, "I work remotely on Fridays"),
        ("Don't forget that I'm allergic to nuts!", REMEMBER, "I'm allergic to nuts"),
        ("recordá que prefiero TypeScript", REMEMBER, "prefiero TypeScript"),
        ("Recorda que trabajo en Acme", REMEMBER, "trabajo en Acme"),
        ("recuerda que vivo en Rosario, por favor", REMEMBER, "vivo en Rosario"),
        (
            "Por favor, recordá que mi cumpleaños es el 3 de mayo",
            REMEMBER,
            "mi cumpleaños es el 3 de mayo",
        ),
        ("acordate de que los lunes voy al gimnasio", REMEMBER, "los lunes voy al gimnasio"),
        ("Acuérdate de que uso Neovim", REMEMBER, "uso Neovim"),
        ("acordate que odio el café", REMEMBER, "odio el café"),
        ("no te olvides de que tengo un gato", REMEMBER, "tengo un gato"),
        ("forget my job", FORGET, "my job"),
        ("Please forget about my old address.", FORGET, "my old address"),
        ("forget that I like jazz", FORGET, "I like jazz"),
        ("olvidate de mi trabajo", FORGET, "mi trabajo"),
        ("Olvídate de mi dirección, gracias", FORGET, "mi dirección"),
        ("olvidá que te dije que fumo", FORGET, "te dije que fumo"),
    ],
)
def test_commands_are_recognised_with_their_subject(
    message: str, action: CommandAction, subject: str
) -> None:
    command = parse_command(message)
    assert command is not None
    assert (command.action, command.subject) == (action, subject)


NEAR_MISSES = [
    # talking about remembering or forgetting
    "I remember that you said you liked Rome",
    "Do you remember that trip to Paris?",
    "remember when we met?",
    "Remember that time we went skiing? It was great",
    "Remember that day at the beach, the sun was brutal",
    "Can you remember that for me?",
    "I always forget my keys",
    "I forgot to call my mother",
    "don't forget the milk",
    "Never forget where you came from",
    "forget it",
    "Forget it, let's move on",
    "forget about it",
    "forget everything",
    "remembering names is hard for me",
    "The movie Remember Me is underrated",
    "a forgettable movie, honestly",
    "We should remember to book the hotel",
    # Spanish
    "¿Recordás que fuimos a Roma?",
    "recordás que te dije lo de Ana?",
    "Me acuerdo de que fuimos a la playa",
    "¿te acordás de mi hermana?",
    "no te olvides de comprar pan",
    "olvidate, no importa",
    "olvidate de eso",
    "Olvidé mi contraseña otra vez",
    "Me olvidé de todo",
    "Ana olvida las llaves siempre",
    "olvida las llaves siempre",
    "Recordemos que mañana hay feriado",
    "el recuerdo que tengo de Roma es lindo",
    # plain statements that contain the words
    "I prefer TypeScript, remember that",
    "Please help me remember my password policy?",
    "",
    "   ",
]


@pytest.mark.parametrize("message", NEAR_MISSES)
def test_plain_messages_are_never_commands(message: str) -> None:
    assert parse_command(message) is None


@pytest.mark.parametrize(
    ("message", "key", "value"),
    [
        ("remember that my name is Ana", "name", "Ana"),
        ("remember that my favorite language is TypeScript", "favorite_language", "TypeScript"),
        ("please remember editor: Neovim", "editor", "Neovim"),
        ("remember that Lenguaje Preferido: TypeScript", "lenguaje_preferido", "TypeScript"),
        ("recordá que mi cumpleaños es el 3 de mayo", "cumpleaños", "el 3 de mayo"),
        ("recordá que mis hijos son Ana y Juan", "hijos", "Ana y Juan"),
        ("recordá que prefiero TypeScript", "nota", "prefiero TypeScript"),
        ("remember that I prefer tabs", "note", "I prefer tabs"),
        ("remember that at 9:30 I have standup", "note", "at 9:30 I have standup"),
    ],
)
def test_a_remembered_fact_takes_its_key_from_what_was_said(
    message: str, key: str, value: str
) -> None:
    command = parse_command(message)
    assert command is not None
    assert command.fact() == (key, value)


@pytest.mark.parametrize(
    ("message", "keys"),
    [
        ("olvidate de mi trabajo", ["trabajo", "mi_trabajo"]),
        ("forget my favorite language", ["favorite_language", "my_favorite_language"]),
        ("forget about the Lenguaje Preferido", ["lenguaje_preferido", "the_lenguaje_preferido"]),
        ("forget name", ["name"]),
    ],
)
def test_a_forget_names_the_keys_it_may_mean(message: str, keys: list[str]) -> None:
    command = parse_command(message)
    assert command is not None
    assert command.keys() == keys
