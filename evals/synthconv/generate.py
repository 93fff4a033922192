"""Seeded generator of the second development set: multi-session conversations + questions.

The first development set (`evals/longconv/data`) was written by hand, by one author, in
one go; a ranking tuned on it can learn that author's habits (questions that echo the
answer's words, dates named in the text). This set is made by a different method so it
cannot share those biases: a program with its own people, places, events and phrasings
draws, from one seed, two people's lives over a year and a half, tells them as chat
sessions, and asks questions whose evidence it knows because it placed it.

It is shaped like the held-out benchmark the project is judged on (multi-session
conversations between two people; every turn one long-term memory "Speaker: text" with its
session's time) and, unlike the first set, asks temporal questions the way that benchmark
does: "When did X happen?", answered by the *session's* date, never by a date in the text
(no turn names a calendar date). The four categories:

* single-hop: one fact told in one turn, often in a reply that shares no word with the
  question ("What is Wren's tortoise called?" -> "Bramble. My niece picked it.");
* temporal: when an event happened; the evidence is the turn that tells it ("yesterday",
  "on Sunday", "this morning"), the answer the session's date (or a day relative to it);
* multi-hop: an aggregate over two to four turns in different sessions ("Which places has
  Odile travelled to?");
* open-domain: an inference from a trait shown indirectly in two turns ("Would Wren enjoy
  a hot-air balloon ride?" <- two turns about heights, neither naming balloons).

Between them: openings, small talk, closings and later mentions of earlier events (a pet's
name, a trip; up to three a session) that share the questions' words without answering them.

    python evals/synthconv/generate.py              # writes evals/synthconv/data/conv-*.json
    python evals/synthconv/generate.py --check      # exit 1 when the committed copy differs

Everything is drawn from `random.Random(seed)` in a fixed order: the same seed gives the
same files on every machine and Python version (only `random.Random` methods whose output
Python keeps stable are used: `random`, `randrange`, `choice`, `shuffle`, `sample`).
Conversations 1-3 are the tune half, 4-6 the report half (`HALVES`).
"""

# ruff: noqa: E501 (the vocabulary and phrasings read best one per line)
from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

SEED = 2029
CONVERSATIONS = 6
HALVES = {"tune": ["sconv-1", "sconv-2", "sconv-3"], "report": ["sconv-4", "sconv-5", "sconv-6"]}
QUESTIONS_PER_CATEGORY = {"single-hop": 20, "temporal": 10, "multi-hop": 8, "open-domain": 6}
DATA = Path(__file__).parent / "data"

# --- vocabulary of this set (none of it taken from any benchmark) -----------------------

PEOPLE = [
    ("Wren", "she"), ("Odile", "she"), ("Kasimir", "he"), ("Thandiwe", "she"),
    ("Bastian", "he"), ("Ines", "she"), ("Rafferty", "he"), ("Yusra", "she"),
    ("Matthias", "he"), ("Saoirse", "she"), ("Lorcan", "he"), ("Nilufar", "she"),
]  # fmt: skip
CITIES = ["Tacoma", "Ghent", "Dunedin", "Halifax", "Bologna", "Tartu", "Bendigo", "Asheville"]
JOBS = [
    ("a sound engineer", "the studio"), ("a pharmacist", "the pharmacy"),
    ("a bus driver", "the depot"), ("a bookkeeper", "the office"),
    ("a physiotherapist", "the clinic"), ("a sous-chef", "the kitchen"),
    ("a surveyor", "the site"), ("a librarian", "the library"),
]  # fmt: skip
SPECIES = [
    "tortoise",
    "ferret",
    "greyhound",
    "rabbit",
    "parrot",
    "tabby cat",
    "guinea pig",
    "corgi",
]
PET_NAMES = ["Bramble", "Pistachio", "Captain Noodle", "Juniper", "Moss", "Figaro", "Tansy",
             "Biro", "Clementine", "Ozzy", "Marmalade", "Quill"]  # fmt: skip
SHELTERS = ["Maple Lane", "Second Paw", "Harbourside", "Willow Creek", "Old Mill", "Cobble Hill"]
NAME_REASONS = [
    "My niece picked it and it stuck.",
    "After a character from a book I loved as a kid.",
    "It was the first thing I said when I saw the little face.",
    "The shelter staff already called it that and I couldn't change it.",
]
DESTINATIONS = ["Lisbon", "Hokkaido", "Oaxaca", "Tasmania", "Reykjavik", "Marrakech",
                "Krakow", "the Dolomites", "Cape Town", "Hanoi", "Patagonia", "the Faroe Islands"]  # fmt: skip
HIGHLIGHTS = [
    "the night market, I ate about nine different skewers",
    "a boat ride at dawn when the water was like glass",
    "a tiny bakery where the owner taught me to fold dumplings",
    "the hot springs, I sat in them until my fingers wrinkled",
    "a street musician who played every evening under our window",
    "hiking up to a lookout where you could see three valleys",
    "the tram rides, I just rode them end to end for fun",
    "a cooking class in somebody's grandmother's kitchen",
]
HOBBIES = ["pottery", "salsa dancing", "woodcarving", "watercolour painting", "Mandarin",
           "bouldering", "the cello", "beekeeping", "sourdough baking", "archery"]  # fmt: skip
VENUES = ["the community centre", "a studio above the hardware shop", "the old fire station",
          "the library annexe", "a warehouse by the river"]  # fmt: skip
HOBBY_REASONS = [
    "My doctor told me I need something that gets me off screens in the evening.",
    "My grandfather did it his whole life, and I found his old tools in the attic.",
    "A coworker dared me, and I'm too proud to back down.",
    "I wanted one thing every week that's only for me, not for work or anybody else.",
    "I saw a video of an eighty-year-old doing it and thought, why not me.",
    "After the winter I had, I needed something to look forward to.",
]
COMPANIES = ["Brightwater", "Halcyon Freight", "Northgate Health", "Copperleaf", "Tidewell",
             "Ashgrove Systems", "Lumen & Pike"]  # fmt: skip
ROLES = ["team lead", "senior analyst", "operations manager", "head of training",
         "project coordinator"]  # fmt: skip
PERKS = [
    "A four-day week",
    "They let me work from home on Fridays",
    "The commute is a fifteen-minute walk",
    "They're paying for my certification",
    "My manager would be someone I actually trust",
]
CONTESTS = ["half marathon", "trail 10K", "chess tournament", "baking contest", "sprint triathlon",
            "pub quiz league final", "open-water swim"]  # fmt: skip
RESULTS = [
    "Third place out of forty",
    "One hour fifty-two minutes, my best ever",
    "Dead last, but I finished with a grin",
    "Second, beaten by a twelve-year-old",
    "Top ten, which I never expected",
]
RELATIVES = [("sister", "she"), ("brother", "he"), ("cousin", "she"), ("uncle", "he"),
             ("aunt", "she"), ("nephew", "he")]  # fmt: skip
RELATIVE_NAMES = {
    "she": ["Petra", "Greer", "Marguerite", "Esme"],
    "he": ["Anselm", "Dov", "Tobiah", "Florin"],
}
FAMILY_EVENTS = [
    ("got married", "get married", "the ceremony was in a barn full of fairy lights"),
    ("had a baby", "have a baby", "a little girl, they named her Posy"),
    ("graduated from nursing school", "graduate from nursing school",
     "top of the class, and we all cried in the bleachers"),
    ("retired after thirty years", "retire", "the whole depot clapped on the last shift"),
    ("opened a bike repair shop", "open a bike repair shop",
     "the place is called Spoke & Saddle, and the queue on day one went round the block"),
]  # fmt: skip
STREETS = ["Fennel Street", "Larkspur Road", "Quarry Lane", "Harrow Terrace", "Tinker Row"]
HOME_FEATURES = [
    "A window seat in the kitchen that gets sun all afternoon",
    "A little yard with an apple tree nobody has pruned in years",
    "Radiators that actually work, which is a first for me",
    "A spare room that's going to be my workshop",
]
INJURIES = [("sprained my ankle", "sprain an ankle", "stepping off a kerb"),
            ("broke my wrist", "break a wrist", "slipping on the ice outside the bakery"),
            ("pulled a muscle in my back", "pull a back muscle", "lifting a sofa for a friend"),
            ("cracked a rib", "crack a rib", "falling off a ladder while cleaning the gutters")]  # fmt: skip
RECOVERIES = ["Three weeks in a brace", "Six weeks of physio", "Two weeks flat on my back",
              "A month of no lifting"]  # fmt: skip
PURCHASES = ["a used camper van", "an e-bike", "a vintage record player", "a sewing machine",
             "a telescope", "a kayak", "a secondhand piano"]  # fmt: skip
PRICES = ["Eleven hundred", "Three hundred and forty", "Two grand, don't judge me",
          "Ninety, from a guy who was moving abroad", "Six fifty after a lot of haggling"]  # fmt: skip
BOOKS = [("The Salt Orchard", "Mira Castell"), ("A Map of Small Rooms", "Jonah Ferrier"),
         ("Nine Winters", "Adaeze Okafor"), ("The Glassblower's Daughter", "Lena Vos"),
         ("Quiet Harbour", "Tom Ellery")]  # fmt: skip
DISHES = ["a lamb tagine", "pierogi", "a lemon polenta cake", "laksa", "a mushroom pie",
          "cardamom buns"]  # fmt: skip
DISH_OUTCOMES = [
    "It came out perfect, the whole flat smelled amazing.",
    "Burnt the bottom, but the middle was heavenly.",
    "Too salty, so I'm trying again on Sunday.",
]
ORGS = ["the food bank on Mercer Street", "an animal shelter", "the hospice garden",
        "a literacy charity", "the river clean-up crew"]  # fmt: skip
VOLUNTEER_REASONS = [
    "My mum volunteered there for years and I wanted to carry it on.",
    "I needed to be around people who aren't on a screen.",
    "They helped my family once, when things were bad.",
]

# Traits shown indirectly, twice, for the open-domain questions: (statements, question,
# answer). No statement names what the question asks about.
TRAITS: list[tuple[tuple[str, str], str, str]] = [
    (("I made it to the third landing of the lighthouse stairs and had to sit down, my legs just stopped.",
      "Glass lifts are my personal nightmare, I take the stairs and keep my eyes on my shoes."),
     "Would {name} enjoy a hot-air balloon ride?", "Probably not: heights frighten {obj}."),
    (("Nothing beats waking up in a tent with frost on the zipper.",
      "I spent the whole weekend on the ridge trail with zero phone signal. Pure bliss."),
     "Would {name} like a week in a remote cabin with no internet?", "Yes: {subj} loves the outdoors and being offline."),
    (("I haven't eaten meat in about six years now.",
      "The lentil stew at that corner place is the only reason I ever go into town."),
     "Would {name} order the brisket platter at a smokehouse?", "Unlikely: {subj} is vegetarian."),
    (("Big parties drain me, I need a full day of silence afterwards.",
      "My ideal Friday is a blanket, a book and nobody calling."),
     "Would {name} enjoy hosting a surprise party for forty people?", "No: crowds tire {obj}; {subj} prefers quiet evenings."),
    (("I spent the evening working out the chords to that song from the radio.",
      "My fingertips are still hard from practising scales every night."),
     "Might {name} enjoy an open jam session at a jazz bar?", "Likely: {subj} plays an instrument and practises a lot."),
    (("I do my best thinking after midnight, always have.",
      "Mornings should be illegal, nobody should speak to me before ten."),
     "Would {name} be happy in a job that starts at six a.m.?", "No: {subj} is a night owl."),
    (("I fixed the toaster myself rather than buy a new one.",
      "I compare prices at three shops before I buy so much as a bar of soap."),
     "Would {name} buy a designer handbag on impulse?", "Unlikely: {subj} is careful with money."),
    (("Salt air fixes everything for me, I could stand on the pier for hours.",
      "If I won the lottery I'd live on a boat, no question."),
     "Would {name} enjoy a sailing holiday?", "Yes: {subj} loves the sea."),
    (("My tomatoes are finally turning red on the balcony.",
      "I spent Sunday on my knees pulling weeds and loved every minute of it."),
     "Would {name} appreciate a gift of heirloom seeds?", "Yes: {subj} is a keen gardener."),
    (("I hate losing, even at board games. My family won't play cards with me any more.",
      "I re-ran the same route four times until I beat my own time."),
     "Would {name} treat a casual office quiz as just a bit of fun?", "Probably not: {subj} is very competitive."),
]  # fmt: skip

OPENINGS = [
    "Hey {other}! It's been a minute. How are you?",
    "Morning {other}! How's your week shaping up?",
    "{other}! Got a second to chat?",
    "Hi hi. Long day, but I wanted to catch up with you.",
    "Evening! Are you around?",
    "Hey you. What's new in your world?",
]
OPENING_REPLIES = [
    "Hey! Always. I've been meaning to message you.",
    "Good timing, I just sat down with a cup of tea.",
    "Hi! Busy, but the good kind of busy. You?",
    "Oh hey! Yes, talk to me, I need a distraction.",
    "Hello! Honestly, I was just thinking about you.",
]
CLOSINGS = [
    "Okay, I need to get going. Talk soon!",
    "I should sleep. This was nice, let's not leave it so long.",
    "Dinner's ready, gotta run. Catch you later!",
    "Right, back to it. Speak soon.",
]
CLOSING_REPLIES = ["Bye! Take care of yourself.", "Night! Good luck with everything.",
                   "Later! Give my love to everyone.", "Talk soon!"]  # fmt: skip
SMALL_TALK = [
    ("The weather here has been so strange, sunshine and hail in the same hour.",
     "Same here! I gave up on umbrellas, they just flip inside out."),
    ("I've been binge-watching a baking show and now I want to make everything.",
     "Ha, which one? I need something new to watch in the evenings."),
    ("Work has been a lot this week, {workplace} is short-staffed again.",
     "Ugh, that sounds exhausting. Are they hiring anyone at least?"),
    ("I finally cleaned out my wardrobe, three bags for the charity shop.",
     "Impressive. Mine is still a disaster, no comment."),
    ("My neighbour's been practising the trumpet at seven every morning.",
     "Oh no. Is it getting any better at least?"),
    ("I've been trying to drink more water, my bottle has little time markers on it.",
     "Those bottles are so bossy, I love it."),
    ("There's a new café on my street and their cinnamon rolls are dangerous.",
     "Don't tell me that, I have zero willpower."),
    ("I went to bed at nine last night and I regret nothing.",
     "Honestly iconic. Sleep is the best hobby."),
    ("My phone screen cracked again, third time this year.",
     "You need one of those chunky cases, the ugly ones that actually work."),
    ("The traffic was awful today, took me an hour to get home.",
     "That's the worst. I listened to a whole podcast in a car park once."),
    ("I started a puzzle, a thousand pieces, all sky.",
     "You're braver than me. All sky sounds like a punishment."),
    ("My landlord finally fixed the leaky tap.",
     "Only took him, what, four months?"),
]  # fmt: skip
REACTIONS = ["That's wonderful, I'm so happy for you!", "Oh wow. Good for you.",
             "Honestly that's the best news I've heard all week.", "Ha, I love that.",
             "You deserve it, seriously.", "That's wild!", "Oh no, that's rough. I'm sorry.",
             "Okay that made me smile."]  # fmt: skip
ACKS = ["Right? I'm still buzzing.", "Thanks, it means a lot.", "Ha, yes.",
        "I'll keep you posted.", "Tell me about it."]  # fmt: skip


@dataclass
class Person:
    name: str
    subj: str  # she / he
    city: str
    job: str
    workplace: str

    @property
    def obj(self) -> str:
        return "her" if self.subj == "she" else "him"

    @property
    def poss(self) -> str:
        return "her" if self.subj == "she" else "his"


@dataclass
class Turn:
    speaker: str
    text: str
    id: str = ""


@dataclass
class Question:
    q: str
    answer: str
    evidence: list[Turn]
    category: str


@dataclass
class Told:
    """An event told in a session: its turns, the questions it answers, and what later
    small talk may call back to."""

    turns: list[Turn]
    questions: list[Question]
    group: tuple[str, str] | None = None  # (aggregate key, item) for multi-hop questions
    group_turn: Turn | None = None
    # Later mentions (line by the teller, reply by the other): they share the event's words
    # without answering its questions, as real conversations come back to things.
    callbacks: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Conversation:
    id: str
    people: tuple[Person, Person]
    sessions: list[tuple[datetime, list[Turn]]] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)


def long_date(when: datetime) -> str:
    return f"{when.day} {when.strftime('%B %Y')}"


def relative(when: datetime, days_before: int) -> str:
    if days_before == 0:
        return long_date(when)
    if days_before == 1:
        return f"the day before {long_date(when)}"
    return f"{days_before} days before {long_date(when)}"


# An event teller: (rng, teller, listener, session time) -> Told. Each takes its slot
# values from pools it has not used yet in this conversation (`used`).
Teller = Callable[[random.Random, Person, Person, datetime, "Pools"], Told]


class Pools:
    """Draws without replacement per conversation, so two pets never share a name."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.left: dict[int, list[Any]] = {}

    def take(self, pool: Sequence[Any]) -> Any:
        left = self.left.setdefault(id(pool), list(pool))
        if not left:
            left.extend(pool)
        return left.pop(self.rng.randrange(len(left)))


def pet(rng: random.Random, me: Person, you: Person, when: datetime, p: Pools) -> Told:
    species, name, shelter = p.take(SPECIES), p.take(PET_NAMES), p.take(SHELTERS)
    announce = Turn(me.name, rng.choice([
        f"Big news: I brought home a {species} from the {shelter} rescue this morning.",
        f"So I did a thing. There's a {species} asleep on my sofa right now, adopted from {shelter} today.",
        f"Guess who adopted a {species} from {shelter} this morning? Me!",
    ]))  # fmt: skip
    ask = Turn(you.name, rng.choice(["No way! What's the little one called?",
                                     "Stop it. Name? I need the name.",
                                     "Aww! And what did you call it?"]))  # fmt: skip
    detail = Turn(me.name, f"{name}. {rng.choice(NAME_REASONS)}")
    react = Turn(you.name, rng.choice(REACTIONS[:6]))
    return Told(
        [announce, ask, detail, react],
        [
            Question(rng.choice([f"When did {me.name} adopt a {species}?", f"When did {me.name} get {me.poss} {species}?",
                                 f"When did the {species} join {me.name}'s household?"]), long_date(when), [announce], "temporal"),
            Question(f"What is the name of {me.name}'s {species}?", name, [detail], "single-hop"),
            Question(f"Which rescue did {me.name} adopt {me.poss} {species} from?", shelter, [announce], "single-hop"),
        ],
        group=("pets", f"a {species} called {name}"),
        group_turn=announce,
        callbacks=[(f"{name} knocked a glass off the table again, little menace.", f"Ha! Give {name} a scratch from me."),
                   (f"The {species} has worked out how to open the cupboard with the treats.", "Genius. Terrifying, but genius."),
                   (f"Taking {name} to the vet tomorrow for a check-up, wish us luck.", "Good luck! Report back.")],
    )  # fmt: skip


def trip(rng: random.Random, me: Person, you: Person, when: datetime, p: Pools) -> Told:
    dest, highlight = p.take(DESTINATIONS), p.take(HIGHLIGHTS)
    days = rng.choice([1, 2, 3])
    ago = {1: "yesterday", 2: "two days ago", 3: "three days ago"}[days]
    announce = Turn(me.name, rng.choice([
        f"I got back from {dest} {ago} and my body still has no idea what time it is.",
        f"Back from {dest}! Landed {ago} and I'm still unpacking.",
    ]))  # fmt: skip
    ask = Turn(you.name, rng.choice(["How was it?? What was the best part?",
                                     "Welcome back! Favourite moment?",
                                     "Tell me everything. What stood out?"]))  # fmt: skip
    detail = Turn(me.name, f"Honestly, {highlight}. I'd go back just for that.")
    react = Turn(you.name, rng.choice(["That sounds dreamy.", "Okay, I'm jealous.",
                                       "Adding it to my list right now."]))  # fmt: skip
    return Told(
        [announce, ask, detail, react],
        [
            Question(rng.choice([f"When did {me.name} come back from {dest}?", f"When did {me.name} return from {me.poss} trip to {dest}?"]),
                     relative(when, days), [announce], "temporal"),
            Question(f"What did {me.name} enjoy most about {me.poss} trip to {dest}?", highlight, [detail], "single-hop"),
        ],
        group=("trips", dest),
        group_turn=announce,
        callbacks=[(f"I was looking at my photos from {dest} again, I miss it.", "You should print some of them, they deserve a wall."),
                   (f"Someone at work is going to {dest} next month, I gave them a whole list of places.", "Ha, of course you did.")],
    )  # fmt: skip


def hobby(rng: random.Random, me: Person, you: Person, when: datetime, p: Pools) -> Told:
    what, venue, reason = p.take(HOBBIES), p.take(VENUES), p.take(HOBBY_REASONS)
    announce = Turn(me.name, rng.choice([
        f"I signed up for {what} lessons at {venue}. The first one was last night!",
        f"New thing: I'm doing {what} now, a weekly class at {venue}. Went to my first one last night.",
    ]))  # fmt: skip
    ask = Turn(you.name, rng.choice(["Ooh, what got you into that?", "Wait, since when? What made you start?",
                                     "Love that. Why now?"]))  # fmt: skip
    detail = Turn(me.name, reason)
    react = Turn(you.name, rng.choice(REACTIONS[:6]))
    return Told(
        [announce, ask, detail, react],
        [
            Question(rng.choice([f"When did {me.name} go to {me.poss} first {what} class?", f"When did {me.name} start learning {what}?"]),
                     relative(when, 1), [announce], "temporal"),
            Question(f"Why did {me.name} start {what}?", reason, [detail], "single-hop"),
            Question(f"Where does {me.name} take {what} classes?", venue, [announce], "single-hop"),
        ],
        group=("hobbies", what),
        group_turn=announce,
        callbacks=[(f"My {what} teacher said I have 'potential', which I'm choosing to take as a compliment.", "It absolutely is! Keep going."),
                   (f"Missed {what} this week because of work and I was grumpy all day.", "Next week then! It'll still be there.")],
    )  # fmt: skip


def job(rng: random.Random, me: Person, you: Person, when: datetime, p: Pools) -> Told:
    company, role, perk = p.take(COMPANIES), p.take(ROLES), p.take(PERKS)
    announce = Turn(me.name, f"I said yes to {company} this afternoon. I'll be their {role}!")
    ask = Turn(you.name, rng.choice(["Congrats!! What won you over in the end?",
                                     "Amazing! What made you say yes?"]))  # fmt: skip
    detail = Turn(me.name, f"{perk}. After years at {me.workplace}, that sold me.")
    react = Turn(you.name, rng.choice(REACTIONS[:6]))
    return Told(
        [announce, ask, detail, react],
        [
            Question(rng.choice([f"When did {me.name} accept the job at {company}?", f"When did {me.name} take the offer from {company}?"]),
                     long_date(when), [announce], "temporal"),
            Question(f"What position did {me.name} accept at {company}?", role, [announce], "single-hop"),
            Question(f"What convinced {me.name} to take the job at {company}?", perk, [detail], "single-hop"),
        ],
        group=("jobs", company),
        group_turn=announce,
        callbacks=[(f"Week two at {company} and I still get lost looking for the kitchen.", "Ha, leave breadcrumbs.")],
    )  # fmt: skip


def contest(rng: random.Random, me: Person, you: Person, when: datetime, p: Pools) -> Told:
    what, result = p.take(CONTESTS), p.take(RESULTS)
    days = (when.weekday() + 1) % 7 or 7  # last Sunday
    announce = Turn(me.name, rng.choice([
        f"Guess who did the {what} in {me.city} on Sunday?",
        f"So, the {what} happened on Sunday. I actually showed up!",
    ]))  # fmt: skip
    ask = Turn(you.name, rng.choice(["YOU! How did it go?", "And?? How did you do?"]))
    detail = Turn(me.name, f"{result}. My legs and my ego are both recovering.")
    react = Turn(you.name, rng.choice(REACTIONS[:6]))
    return Told(
        [announce, ask, detail, react],
        [
            Question(rng.choice([f"When did {me.name} take part in the {what}?", f"When was the {what} {me.name} did?"]),
                     relative(when, days), [announce], "temporal"),
            Question(f"How did {me.name} do in the {what}?", result, [detail], "single-hop"),
        ],
        group=("contests", what),
        group_turn=announce,
        callbacks=[(f"Already thinking about next year's {what}, I want revenge.", "That's the spirit.")],
    )  # fmt: skip


def family(rng: random.Random, me: Person, you: Person, when: datetime, p: Pools) -> Told:
    rel, rel_subj = p.take(RELATIVES)
    rel_name = p.take(RELATIVE_NAMES[rel_subj])
    done, do, how = p.take(FAMILY_EVENTS)
    announce = Turn(me.name, f"My {rel} {rel_name} {done} last weekend!")
    ask = Turn(you.name, rng.choice(["Oh my gosh! How was it?", "Wow! Tell me more!"]))
    detail = Turn(me.name, f"Oh, it was lovely, {how}.")
    react = Turn(you.name, rng.choice(REACTIONS[:6]))
    return Told(
        [announce, ask, detail, react],
        [
            Question(f"When did {me.name}'s {rel} {do}?", f"the weekend before {long_date(when)}", [announce], "temporal"),
            Question(f"What is the name of {me.name}'s {rel}?", rel_name, [announce], "single-hop"),
            Question(f"What detail did {me.name} share about {me.poss} {rel}'s news?", how, [detail], "single-hop"),
        ],
        group=("family", f"{me.poss} {rel} {rel_name} {done}"),
        group_turn=announce,
        callbacks=[(f"{rel_name} sent me more photos, my {rel} is glowing.", "Aww, show me next time!")],
    )  # fmt: skip


def move(rng: random.Random, me: Person, you: Person, when: datetime, p: Pools) -> Told:
    street, feature = p.take(STREETS), p.take(HOME_FEATURES)
    announce = Turn(me.name, f"Boxes everywhere. We moved into the place on {street} yesterday.")
    ask = Turn(you.name, rng.choice(["Finally! What's your favourite thing about it so far?",
                                     "Yay! What's the best bit?"]))  # fmt: skip
    detail = Turn(me.name, f"{feature}.")
    react = Turn(you.name, rng.choice(["Sounds perfect for you.", "I need a tour ASAP."]))
    return Told(
        [announce, ask, detail, react],
        [
            Question(f"When did {me.name} move to {street}?", relative(when, 1), [announce], "temporal"),
            Question(f"What does {me.name} like best about {me.poss} new home?", feature, [detail], "single-hop"),
        ],
        callbacks=[(f"Still finding boxes I haven't opened at the {street} place.", "Classic. Label them next time.")],
    )  # fmt: skip


def injury(rng: random.Random, me: Person, you: Person, when: datetime, p: Pools) -> Told:
    (did, do, how), recovery = p.take(INJURIES), p.take(RECOVERIES)
    announce = Turn(me.name, f"Small disaster: I {did} on Thursday, {how}.")
    ask = Turn(
        you.name, rng.choice(["Oh no! What did the doctor say?", "Ouch. How long are you out?"])
    )
    detail = Turn(me.name, f"{recovery}. I'm going to go mad.")
    react = Turn(you.name, REACTIONS[6])
    days = (when.weekday() - 3) % 7 or 7
    return Told(
        [announce, ask, detail, react],
        [
            Question(f"When did {me.name} {do}?", relative(when, days), [announce], "temporal"),
            Question(f"How did {me.name} {do}?", how, [announce], "single-hop"),
            Question(f"What recovery did the doctor prescribe {me.name} after the injury?", recovery, [detail], "single-hop"),
        ],
    )  # fmt: skip


def purchase(rng: random.Random, me: Person, you: Person, when: datetime, p: Pools) -> Told:
    item, price = p.take(PURCHASES), p.take(PRICES)
    announce = Turn(me.name, f"I finally caved and bought {item} today.")
    ask = Turn(
        you.name, rng.choice(["Ha! How much did that set you back?", "Nice. What did it cost?"])
    )
    detail = Turn(me.name, f"{price}. Worth every penny, I tell myself.")
    react = Turn(you.name, rng.choice(["Not bad at all.", "Treat yourself!"]))
    return Told(
        [announce, ask, detail, react],
        [
            Question(rng.choice([f"When did {me.name} buy {item}?", f"When did {me.name} get {item}?"]), long_date(when), [announce], "temporal"),
            Question(f"How much did {me.name} pay for {item}?", price, [detail], "single-hop"),
        ],
        group=("purchases", item),
        group_turn=announce,
        callbacks=[(f"Took the {item.split(' ', 1)[1]} out properly at the weekend, no regrets.", "Told you it'd be worth it.")],
    )  # fmt: skip


def book(rng: random.Random, me: Person, you: Person, when: datetime, p: Pools) -> Told:
    title, author = p.take(BOOKS)
    announce = Turn(me.name, f"I stayed up until two last night finishing {title}.")
    ask = Turn(you.name, "Who wrote that one again? And was it good?")
    detail = Turn(me.name, f"{author}. The ending wrecked me in the best way.")
    return Told(
        [announce, ask, detail],
        [
            Question(f"When did {me.name} finish reading {title}?", relative(when, 1), [announce], "temporal"),
            Question(f"Who is the author of the book {me.name} stayed up late finishing?", author, [announce, detail], "single-hop"),
        ],
        group=("books", title),
        group_turn=announce,
        callbacks=[(f"I lent {title} to my neighbour, I need someone to talk about it with.", "Good plan, spread the pain.")],
    )  # fmt: skip


def cooking(rng: random.Random, me: Person, you: Person, when: datetime, p: Pools) -> Told:
    dish, outcome = p.take(DISHES), p.take(DISH_OUTCOMES)
    announce = Turn(me.name, f"I tried my grandmother's recipe for {dish} tonight.")
    ask = Turn(you.name, "Ooh. Did it turn out?")
    detail = Turn(me.name, outcome)
    return Told(
        [announce, ask, detail],
        [
            Question(f"What did {me.name} cook from {me.poss} grandmother's recipe?", dish, [announce], "single-hop"),
            Question(f"How did {me.name}'s attempt at {me.poss} grandmother's {dish} go?", outcome, [detail], "single-hop"),
        ],
    )  # fmt: skip


def volunteer(rng: random.Random, me: Person, you: Person, when: datetime, p: Pools) -> Told:
    org, reason = p.take(ORGS), p.take(VOLUNTEER_REASONS)
    announce = Turn(me.name, f"I did my first volunteer shift at {org} this morning.")
    ask = Turn(you.name, "That's lovely. How did that come about?")
    detail = Turn(me.name, reason)
    return Told(
        [announce, ask, detail],
        [
            Question(f"When did {me.name} do {me.poss} first volunteer shift?", long_date(when), [announce], "temporal"),
            Question(f"Why did {me.name} start volunteering at {org}?", reason, [detail], "single-hop"),
        ],
        group=("volunteering", org),
        group_turn=announce,
        callbacks=[(f"Another shift at {org} this morning, my feet hurt but I loved it.", "You're a good egg.")],
    )  # fmt: skip


# How many of each event a person lives through (drawn once per person).
EVENTS: list[tuple[Teller, tuple[int, int]]] = [
    (pet, (1, 2)), (trip, (2, 3)), (hobby, (1, 2)), (job, (0, 1)), (contest, (1, 2)),
    (family, (1, 2)), (move, (0, 1)), (injury, (0, 1)), (purchase, (1, 2)), (book, (0, 1)),
    (cooking, (0, 1)), (volunteer, (0, 1)),
]  # fmt: skip

GROUP_QUESTIONS = {
    "pets": ("What pets has {name} adopted?", 2),
    "trips": ("Which places has {name} travelled to?", 2),
    "hobbies": ("What classes has {name} signed up for?", 2),
    "contests": ("Which competitions has {name} taken part in?", 2),
    "family": ("What family news has {name} shared?", 2),
    "purchases": ("What big purchases has {name} made?", 2),
}
PAIR_QUESTIONS = {
    "trips": "Which places have {a} and {b} travelled to between them?",
    "pets": "What animals did {a} and {b} adopt?",
    "hobbies": "What new hobbies did {a} and {b} take up?",
}


def make_conversation(rng: random.Random, number: int) -> Conversation:
    (n1, s1), (n2, s2) = rng.sample(PEOPLE, 2)
    cities = rng.sample(CITIES, 2)
    jobs = rng.sample(JOBS, 2)
    people = (
        Person(n1, s1, cities[0], *jobs[0]),
        Person(n2, s2, cities[1], *jobs[1]),
    )
    conv = Conversation(f"sconv-{number}", people)
    pools = Pools(rng)
    # Each person's events, in a random order, spread over the sessions.
    plan: list[tuple[Teller, int]] = []
    for who in (0, 1):
        for teller, (low, high) in EVENTS:
            plan += [(teller, who)] * (low + rng.randrange(high - low + 1))
    rng.shuffle(plan)
    sessions = 14 + rng.randrange(5)
    per_session: list[list[tuple[Teller, int]]] = [[] for _ in range(sessions)]
    for n, item in enumerate(plan):
        per_session[n * sessions // len(plan)].append(item)
    # Three traits per person, each shown in two different sessions.
    traits = rng.sample(range(len(TRAITS)), 6)
    trait_at: dict[int, list[tuple[int, int, int]]] = {}  # session -> (who, trait, statement)
    for k, trait in enumerate(traits):
        first, second = sorted(rng.sample(range(sessions), 2))
        trait_at.setdefault(first, []).append((k // 3, trait, 0))
        trait_at.setdefault(second, []).append((k // 3, trait, 1))
    trait_turns: dict[tuple[int, int], list[Turn]] = {}

    when = datetime(2024, 1, 1) + timedelta(
        days=rng.randrange(300), minutes=rng.randrange(600, 1320)
    )
    told: list[tuple[int, Told]] = []
    callbacks: list[tuple[int, int, tuple[str, str]]] = []  # (session, teller, lines)
    for s in range(sessions):
        turns: list[Turn] = []
        starter = rng.randrange(2)
        me, you = people[starter], people[1 - starter]
        turns.append(Turn(me.name, rng.choice(OPENINGS).format(other=you.name)))
        turns.append(Turn(you.name, rng.choice(OPENING_REPLIES)))
        segments: list[list[Turn]] = []
        for teller, who in per_session[s]:
            event = teller(rng, people[who], people[1 - who], when, pools)
            told.append((who, event))
            segments.append(event.turns)
            callbacks += [(s, who, lines) for lines in event.callbacks]
        for who, trait, statement in trait_at.get(s, []):
            said = Turn(people[who].name, TRAITS[trait][0][statement])
            trait_turns.setdefault((who, trait), []).append(said)
            segments.append(
                [said, Turn(people[1 - who].name, rng.choice(REACTIONS[3:6] + ACKS[2:3]))]
            )
        for _ in range(1 + rng.randrange(3)):
            who = rng.randrange(2)
            line, reply = rng.choice(SMALL_TALK)
            segments.append([
                Turn(people[who].name, line.format(workplace=people[who].workplace)),
                Turn(people[1 - who].name, reply),
            ])  # fmt: skip
        earlier = [(who, lines) for at, who, lines in callbacks if at < s]
        for k in rng.sample(range(len(earlier)), min(len(earlier), rng.randrange(4))):
            who, (line, reply) = earlier[k]  # a later mention of an earlier event
            segments.append([Turn(people[who].name, line), Turn(people[1 - who].name, reply)])
        rng.shuffle(segments)
        for segment in segments:
            turns += segment
            if rng.random() < 0.3:  # the teller adds a word after the reaction
                turns.append(Turn(segment[0].speaker, rng.choice(ACKS)))
        closer = rng.randrange(2)
        turns.append(Turn(people[closer].name, rng.choice(CLOSINGS)))
        turns.append(Turn(people[1 - closer].name, rng.choice(CLOSING_REPLIES)))
        for n, turn in enumerate(turns, start=1):
            turn.id = f"D{s + 1}:{n}"
        conv.sessions.append((when, turns))
        when += timedelta(days=4 + rng.randrange(30), minutes=rng.randrange(-120, 120))

    conv.questions = pick_questions(rng, people, told, traits, trait_turns)
    return conv


def pick_questions(
    rng: random.Random,
    people: tuple[Person, Person],
    told: list[tuple[int, Told]],
    traits: list[int],
    trait_turns: dict[tuple[int, int], list[Turn]],
) -> list[Question]:
    pool: dict[str, list[Question]] = {c: [] for c in QUESTIONS_PER_CATEGORY}
    for _, event in told:
        for q in event.questions:
            pool[q.category].append(q)
    groups: dict[tuple[int, str], list[tuple[str, Turn]]] = {}
    for who, event in told:
        if event.group and event.group_turn:
            groups.setdefault((who, event.group[0]), []).append((event.group[1], event.group_turn))
    for (who, key), items in groups.items():
        template, least = GROUP_QUESTIONS.get(key, ("", 99))
        if len(items) >= least:
            pool["multi-hop"].append(Question(
                template.format(name=people[who].name), "; ".join(i for i, _ in items),
                [t for _, t in items], "multi-hop",
            ))  # fmt: skip
    for key, template in PAIR_QUESTIONS.items():
        a, b = groups.get((0, key), []), groups.get((1, key), [])
        if a and b:
            pool["multi-hop"].append(Question(
                template.format(a=people[0].name, b=people[1].name),
                "; ".join(i for i, _ in a + b), [t for _, t in a + b], "multi-hop",
            ))  # fmt: skip
    for k, trait in enumerate(traits):
        person = people[k // 3]
        _, question, answer = TRAITS[trait]
        fields = {"name": person.name, "subj": person.subj, "obj": person.obj}
        pool["open-domain"].append(Question(
            question.format(**fields), answer.format(**fields),
            trait_turns[(k // 3, trait)], "open-domain",
        ))  # fmt: skip
    chosen: list[Question] = []
    for category, wanted in QUESTIONS_PER_CATEGORY.items():
        candidates = pool[category]
        picked = rng.sample(range(len(candidates)), min(wanted, len(candidates)))
        chosen += [candidates[i] for i in sorted(picked)]
    return chosen


def to_json(conv: Conversation) -> dict[str, Any]:
    return {
        "id": conv.id,
        "speakers": [p.name for p in conv.people],
        "generated_by": f"evals/synthconv/generate.py --seed {SEED}",
        "sessions": [
            {
                "session": n,
                "date": when.strftime("%Y-%m-%d %H:%M"),
                "turns": [{"id": t.id, "speaker": t.speaker, "text": t.text} for t in turns],
            }
            for n, (when, turns) in enumerate(conv.sessions, start=1)
        ],
        "questions": [
            {"q": q.q, "answer": q.answer, "evidence": [t.id for t in q.evidence], "category": q.category}
            for q in conv.questions
        ],
    }  # fmt: skip


def generate(seed: int = SEED) -> dict[str, str]:
    """File name -> JSON text of every conversation, deterministically from `seed`."""
    rng = random.Random(seed)
    files = {}
    for number in range(1, CONVERSATIONS + 1):
        conv = to_json(make_conversation(rng, number))
        files[f"{conv['id']}.json"] = json.dumps(conv, indent=2, ensure_ascii=False) + "\n"
    return files


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--out", type=Path, default=DATA)
    parser.add_argument("--check", action="store_true", help="compare with --out, write nothing")
    args = parser.parse_args(argv)
    files = generate(args.seed)
    if args.check:
        stale = [n for n, text in files.items() if not (args.out / n).is_file()
                 or (args.out / n).read_text() != text]  # fmt: skip
        for name in stale:
            print(f"{args.out / name} differs from the generator's output", file=sys.stderr)
        return 1 if stale else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (args.out / name).write_text(text)
    print(f"wrote {len(files)} conversations to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
