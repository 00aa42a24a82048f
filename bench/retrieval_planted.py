"""Planted facts for the retrieval benchmark (:func:`planted_conversations`): seeded synthetic
conversations of everyday assistant chat (cooking, travel, code, money, ...; user turns of ~15-60
words, assistant turns of ~50-130 words) with facts planted at known depths ("my locker code is
4471") and, at the end, one question per fact, in the shape of ``bench/retrieval_data.py``
(:class:`~bench.retrieval_data.Conversation`). See that module's docstring, part B.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from bench.retrieval_data import Conversation, Question, _overlap
from bench.retrieval_planted_facts import _Fact, _facts

__all__ = ["PlantedSettings", "planted_conversations"]


#: the first turn of a split fact: the bare value (the next turn says what it is)
_HOLD = (
    "Can you hold on to something for me? {value}. I'll explain in a second.",
    "Quick, write this down before I forget: {value}.",
    "Please keep this for me: {value}.",
)


_HOLD_AI = "Sure, I've noted it: {value}. What is it for?"


_ACKS = (
    "Got it, I'll keep that in mind.",
    "Noted! Let me know if you want me to remind you later.",
    "Thanks for telling me, I've made a note of it.",
    "Understood. Anything else you want me to keep track of?",
    "Okay, that's noted. Good luck with it!",
)


# filler: a topic's user openers, follow-ups and assistant sentences
_TOPICS: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "cooking": (
        (
            "What can I make for dinner with chickpeas, spinach and a tin of tomatoes?",
            "How long should I roast a tray of root vegetables?",
            "My risotto always turns out gluey. What am I doing wrong?",
            "Can you suggest a quick lunch I can prep on Sunday for the whole week?",
            "Is it worth buying a cast iron pan, or is non-stick fine?",
            "How do I get crispy tofu without deep frying it?",
        ),
        (
            "I only have about thirty minutes.",
            "Nothing too spicy please, the kids are eating too.",
            "I have an oven and two burners, that's it.",
            "Ideally something that reheats well.",
        ),
        (
            "A chickpea and spinach stew is a good fit: soften an onion, add garlic and cumin, "
            "then the tomatoes and drained chickpeas.",
            "Roast at 200°C for 35 to 45 minutes, turning once halfway through.",
            "Risotto goes gluey when the rice is stirred too hard or overcooked; add the stock "
            "a ladle at a time and stop while it still has a slight bite.",
            "Press the tofu for twenty minutes, toss it in cornstarch and bake it on a hot tray.",
            "Cast iron lasts for decades and handles high heat, but it needs to be dried and "
            "oiled after washing.",
            "Grain bowls keep well for four days if you store the dressing separately.",
            "Season at the end; tinned tomatoes vary a lot in salt.",
            "A squeeze of lemon just before serving brightens almost any stew.",
            "If you double the recipe, use a wider pan rather than a deeper one.",
        ),
    ),
    "travel": (
        (
            "I have four days in Lisbon in October. How should I split them?",
            "Is it cheaper to take the train or fly between Milan and Rome?",
            "What should I pack for a week of hiking in the Scottish Highlands?",
            "Any tips for dealing with jet lag on a flight to Tokyo?",
            "How far in advance should I book accommodation for a summer trip to Croatia?",
        ),
        (
            "I'm travelling with hand luggage only.",
            "My budget is fairly tight this time.",
            "I don't mind early starts.",
        ),
        (
            "Spend the first day in Alfama and Baixa on foot, then take the tram up to the "
            "castle in the late afternoon.",
            "The high-speed train takes about three hours city centre to city centre, which "
            "usually beats flying once you count the airport transfers.",
            "Pack layers: a base layer, a fleece and a proper waterproof shell matter more than "
            "one heavy coat.",
            "Shift your sleep by an hour a day in the week before you leave and get daylight "
            "in the morning once you arrive.",
            "For the coast in July and August, booking three to four months ahead gives you the "
            "best choice.",
            "Day passes for public transport often pay for themselves after three rides.",
            "Keep a photo of your passport in your email in case the original goes missing.",
            "Midges can be bad in summer, so a head net is worth its weight.",
        ),
    ),
    "code": (
        (
            "Why does my Python script say 'list index out of range' on the last line of the file?",
            "How do I read a CSV file with pandas and skip the first two rows?",
            "What's the difference between a list and a tuple in Python?",
            "My SQL query with a LEFT JOIN returns duplicate rows. Why?",
            "How do I undo my last git commit but keep the changes?",
            "Can you explain what a race condition is in simple terms?",
        ),
        (
            "I'm fairly new to this.",
            "It's for a small script at work, nothing fancy.",
            "I'd like to understand it, not just copy a fix.",
        ),
        (
            "That error means you access an index past the end of the list, often because the "
            "file ends with an empty line.",
            "Use pd.read_csv with skiprows=2, and check the header row afterwards.",
            "Lists can be changed after they're created and tuples cannot, which makes tuples "
            "usable as dictionary keys.",
            "A LEFT JOIN repeats a row once for every match on the right side, so a one-to-many "
            "relationship multiplies your rows.",
            "git reset --soft HEAD~1 moves the branch back one commit and leaves your changes "
            "staged.",
            "A race condition happens when two threads touch the same data and the result "
            "depends on which one gets there first.",
            "Adding a small test that reproduces the bug first makes the fix much easier to trust.",
            "Print the length of the list just before the failing line to see what's going on.",
        ),
    ),
    "money": (
        (
            "How much of my salary should I be putting into savings each month?",
            "Is it better to pay off my student loan early or invest the extra money?",
            "What's a simple way to track my spending without a complicated app?",
            "Should I switch to a fixed-rate energy tariff right now?",
            "How do index funds actually work?",
        ),
        (
            "I'm in my early thirties.",
            "I don't have much of an emergency fund yet.",
            "Keep it simple please, I'm not a finance person.",
        ),
        (
            "A common rule of thumb is to save around twenty percent, but building an emergency "
            "fund of three to six months of expenses comes first.",
            "If the loan's interest rate is lower than what you could reasonably expect from "
            "investing, investing usually comes out ahead over the long run.",
            "A spreadsheet with one row per week and five spending categories is enough for "
            "most people.",
            "Fixed tariffs trade a slightly higher price for predictability; compare the unit "
            "rates and the exit fees.",
            "An index fund buys every company in an index, so you own a small slice of the "
            "whole market at a low fee.",
            "Automating the transfer on payday makes saving much easier to stick to.",
            "Check whether your employer matches pension contributions; that's free money.",
        ),
    ),
    "fitness": (
        (
            "I want to start running. How do I avoid getting injured in the first month?",
            "What's a good beginner strength routine I can do at home?",
            "How many rest days should I take per week?",
            "Is stretching before a run actually useful?",
            "My knees hurt after cycling. Is my saddle too low?",
        ),
        (
            "I used to play football but haven't exercised in years.",
            "I can do about three sessions a week.",
            "I don't have any equipment apart from a yoga mat.",
        ),
        (
            "Start with run-walk intervals three times a week and increase the total time by no "
            "more than ten percent a week.",
            "Squats, push-ups, lunges, glute bridges and planks cover most of the body without "
            "equipment.",
            "One or two rest days a week is plenty for most beginners, and easy walks count as "
            "rest.",
            "A short dynamic warm-up such as leg swings and a few minutes of easy jogging helps "
            "more than static stretching.",
            "Knee pain at the front often means the saddle is too low; at full extension your "
            "leg should be almost straight.",
            "Sleep and protein matter as much as the workouts themselves.",
            "Keep a short log of what you did so you can see progress after a few weeks.",
        ),
    ),
    "writing": (
        (
            "Can you help me write a polite email asking my manager for a day off next Friday?",
            "How do I make my cover letter sound less generic?",
            "Could you shorten this paragraph for a newsletter?",
            "What's a good way to open a speech at a retirement party?",
            "How do I say no to a colleague's request without sounding rude?",
        ),
        (
            "The tone should be friendly but professional.",
            "It needs to fit in about a hundred words.",
            "My manager is quite formal.",
        ),
        (
            "Keep it short: state the date, offer to hand over anything urgent, and thank them.",
            "Open with one concrete achievement that matches the job ad instead of a general "
            "statement about being passionate.",
            "Cut the filler phrases and lead with the most important sentence.",
            "A short personal story about the person usually lands better than a joke.",
            "Acknowledge the request, explain briefly that you can't take it on, and suggest an "
            "alternative if you have one.",
            "Reading the text aloud once is the quickest way to catch clumsy sentences.",
            "End with a clear next step so the reader knows what you need from them.",
        ),
    ),
    "home": (
        (
            "How do I fix a dripping kitchen tap?",
            "What's the best way to get rid of mould on a bathroom ceiling?",
            "Should I paint the walls or the skirting boards first?",
            "How do I bleed a radiator?",
            "Any tips for soundproofing a bedroom that faces a busy street?",
        ),
        (
            "I rent, so nothing too permanent.",
            "I'm not very handy, to be honest.",
            "I have a basic toolbox.",
        ),
        (
            "A dripping tap usually needs a new washer or cartridge; turn off the water under "
            "the sink first.",
            "Clean the mould with a diluted bleach solution and improve ventilation, otherwise "
            "it comes back.",
            "Paint the ceiling first, then the walls, and do the skirting boards last.",
            "Turn the heating off, hold a cloth under the valve and open it a quarter turn with "
            "a radiator key until water comes out.",
            "Heavy curtains and sealing gaps around the window frame make a noticeable difference.",
            "Take a photo before you take anything apart so you know how it goes back together.",
            "Most hardware stores will match a part if you bring the old one in.",
        ),
    ),
    "garden": (
        (
            "When should I plant tomatoes outside?",
            "Why are the leaves on my basil turning yellow?",
            "What vegetables are easy to grow on a small balcony?",
            "How do I start a compost bin?",
        ),
        (
            "The balcony gets sun in the afternoon.",
            "I've never grown anything before.",
            "I'd rather not use chemicals.",
        ),
        (
            "Plant tomatoes out once night temperatures stay above ten degrees, usually late "
            "spring.",
            "Yellow basil leaves usually mean too much water; let the top of the soil dry out "
            "between waterings.",
            "Lettuce, radishes, cherry tomatoes and herbs do well in containers.",
            "Mix green material like vegetable scraps with brown material like cardboard, and "
            "turn it every couple of weeks.",
            "Containers dry out fast in summer, so check them every day.",
            "A layer of mulch keeps the soil moist and the weeds down.",
        ),
    ),
}


def _filler_pair(rng: random.Random) -> tuple[str, str]:
    topic = rng.choice(sorted(_TOPICS))
    openers, followups, answers = _TOPICS[topic]
    user = [rng.choice(openers)]
    if rng.random() < 0.7:
        user.append(rng.choice(followups))
    ai = rng.sample(answers, k=rng.randint(3, min(6, len(answers))))
    return " ".join(user), " ".join(ai)


@dataclass(frozen=True)
class PlantedSettings:
    #: conversation lengths in messages (even: human/AI pairs)
    lengths: tuple[int, ...] = (200, 500, 1_000)
    #: depths in messages before the question at which facts are planted (those < length)
    depths: tuple[int, ...] = (10, 40, 100, 200, 400, 800)
    #: facts planted at each depth (a couple of turns apart)
    facts_per_depth: int = 2
    #: conversations per length, each with its own seed
    seeds: tuple[int, ...] = (0, 1, 2, 3)
    #: distinct filler pairs shared by all conversations
    pool: int = 600
    #: share of the facts that can be split that are told in two turns (value, then meaning)
    split_rate: float = 0.5


def planted_conversations(settings: PlantedSettings = PlantedSettings()) -> list[Conversation]:
    """One conversation per (length, seed), facts at every depth below the length."""
    pool_rng = random.Random(1_000_003)
    pool: list[tuple[str, str]] = []
    seen: set[str] = set()
    while len(pool) < settings.pool:
        pair = _filler_pair(pool_rng)
        if pair[1] not in seen:
            seen.add(pair[1])
            pool.append(pair)
    out: list[Conversation] = []
    for length in settings.lengths:
        if length % 2 or length < 4:
            raise ValueError(f"conversation length must be even and >= 4, got {length}")
        for seed in settings.seeds:
            out.append(_planted(length, seed, settings, pool))
    return out


# long: one seeded pass: split up, the order of the RNG draws (which fixes the data) would scatter
def _planted(
    length: int, seed: int, settings: PlantedSettings, pool: Sequence[tuple[str, str]]
) -> Conversation:
    rng = random.Random(seed * 7_919 + length)
    name = f"planted-{length}-s{seed}"
    pairs = length // 2
    if pairs > len(pool):
        raise ValueError(f"a pool of {len(pool)} filler pairs is too small for {length} messages")
    chosen = rng.sample(range(len(pool)), pairs)
    texts: list[list[str]] = [list(pool[i]) for i in chosen]
    facts = _facts(rng)
    rng.shuffle(facts)
    # plant slots: pair index counted from the end; depth d (messages before the question, even)
    # is the pair whose human message is d messages before the end. Facts at one depth are three
    # pairs apart, so a split fact's second turn and every neighbour stay filler.
    plans: list[tuple[int, _Fact, int, bool]] = []  # (pair index, fact, depth, split)
    taken: set[int] = set()
    for depth in settings.depths:
        for j in range(settings.facts_per_depth):
            d = depth + 6 * j
            d += d % 2
            index = pairs - d // 2
            if index < 1 or index in taken or not facts:
                continue
            fact = facts.pop()
            split = fact.split is not None and index + 1 < pairs
            split = split and rng.random() < settings.split_rate
            taken.update((index, index + 1) if split else (index,))
            plans.append((index, fact, d, split))
    for index, fact, _, split in plans:
        if split:
            assert fact.split is not None
            value, meaning = fact.split
            texts[index] = [rng.choice(_HOLD).format(value=value), _HOLD_AI.format(value=value)]
            texts[index + 1] = [meaning, rng.choice(_ACKS)]
        else:
            user, ai = fact.plant
            texts[index] = [user, ai if ai is not None else rng.choice(_ACKS)]
    # one distractor per fact, prepended to a filler user turn away from every plant
    free = [i for i in range(pairs) if all(abs(i - t) > 1 for t in taken)]
    for _, fact, _, _ in plans:
        if not free:
            break
        i = free.pop(rng.randrange(len(free)))
        texts[i][0] = f"{fact.distractor} {texts[i][0]}"
    messages: list[BaseMessage] = []
    for i, (user, ai) in enumerate(texts):
        messages.append(HumanMessage(user, id=f"{name}-h{i}"))
        messages.append(AIMessage(ai, id=f"{name}-a{i}"))
    questions: list[Question] = []
    for n, (index, fact, d, split) in enumerate(sorted(plans, key=lambda p: -p[2])):
        ai_holds = fact.plant[1] is not None and not split
        if ai_holds:
            relevant: tuple[str, ...] = (f"{name}-a{index}",)
        else:
            relevant = (f"{name}-h{index}", f"{name}-a{index}") if split else (f"{name}-h{index}",)
        evidence = [str(messages[2 * index + (1 if ai_holds else 0)].content)]
        text = rng.choice(fact.questions)
        questions.append(
            Question(
                qid=f"{name}-q{n}-{fact.key}",
                text=text,
                relevant=relevant,
                kind="planted-split" if split else "planted-ai" if ai_holds else "planted-user",
                topic=fact.key,
                depth=d - 1 if ai_holds or split else d,
                overlap=_overlap(text, evidence),
            )
        )
    return Conversation(
        name=name,
        source="planted",
        messages=tuple(messages),
        questions=tuple(questions),
        info={
            "length": length,
            "seed": seed,
            "facts": len(plans),
            "split": sum(1 for p in plans if p[3]),
        },
    )
