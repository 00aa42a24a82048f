"""The facts :mod:`bench.retrieval_planted` plants: each a seeded fact told by the user or the
assistant ("my locker code is 4471"), with two to four paraphrased questions (some sharing no
content word with it) and a distractor on the same topic.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

_NAMES = (
    "Priya Amina Tomasz Ingrid Mateo Keiko Olu Siobhan Rafael Leila Henrik Chiara Dmitri Nadia "
    "Joaquin Freya Ravi Marguerite Emeka Sunniva"
).split()


_SURNAMES = (
    "Okafor Lindqvist Moreau Castellanos Nakamura Brennan Kowalczyk Haddad Oyelaran Fitzgerald "
    "Varga Albrecht"
).split()


_CITIES = (
    "Porto Tallinn Valparaíso Ljubljana Hobart Kraków Oaxaca Bergen Marrakesh Halifax Cluj "
    "Trondheim Medellín Bruges"
).split()


_WEEKDAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()


_MONTHS = (
    "January February March April May June July August September October November December"
).split()


_WORDS = (
    "maple otter copper lantern harbor velvet meadow thistle comet pepper walnut glacier cobalt "
    "saffron juniper falcon"
).split()


def _time(rng: random.Random) -> str:
    return f"{rng.randint(5, 21)}:{rng.choice(('05', '15', '20', '35', '40', '50'))}"


@dataclass(frozen=True)
class _Fact:
    key: str
    #: (user text, AI text or None for a generic acknowledgement); AI text given = the AI holds it
    plant: tuple[str, str | None]
    questions: tuple[str, ...]
    distractor: str
    #: (value, what it is): the fact may also be told in two turns, the bare value first and
    #: what it is for in the next turn (the one the question's words match)
    split: tuple[str, str] | None = None


# long: a data table: every planted fact with its paraphrased questions and distractor
def _facts(rng: random.Random) -> list[_Fact]:
    """Every fact template with fresh values from ``rng``."""
    name, surname, city = rng.choice(_NAMES), rng.choice(_SURNAMES), rng.choice(_CITIES)
    locker = f"{rng.randint(1000, 9999)}"
    flight = f"{_time(rng)} on {rng.choice(_WEEKDAYS)}"
    plate = (
        f"{rng.choice('BKMRTW')}{rng.choice('AELNS')}-{rng.randint(100, 999)}-"
        f"{rng.choice('CDHPX')}{rng.choice('AJQZ')}"
    )
    dentist = f"{rng.choice(_WEEKDAYS)} at {_time(rng)}"
    anniversary = f"{rng.choice(_MONTHS)} {rng.randint(1, 28)}"
    staff = f"E-{rng.randint(100000, 999999)}"
    door = f"{rng.randint(1000, 9999)}"
    policy = f"HX-{rng.randint(1000, 9999)}-{rng.randint(100, 999)}"
    birthday = f"{rng.choice(_MONTHS)} {rng.randint(1, 28)}"
    return [
        _Fact(
            "locker",
            (
                f"Before I forget: my locker at the climbing gym is number {rng.randint(10, 99)} "
                f"and the code is {locker}. I keep losing the sticky note I wrote it on, so please "
                "hang on to it for me.",
                None,
            ),
            (
                "What was the code for my gym locker again?",
                "Remind me of the combination that opens the place I keep my stuff while I "
                "boulder.",
                "I'm standing in the changing room and blanked - which digits did I give you?",
            ),
            "The climbing gym was packed tonight, I waited twenty minutes for the overhang wall.",
            (locker, "That number is the code for my locker at the climbing gym, by the way."),
        ),
        _Fact(
            "sister_city",
            (
                f"Big family news: my sister {name} finally moved to {rng.choice(_CITIES)} last "
                "weekend. She found a flat near the old town, so I'll probably be visiting a lot "
                "more often this year.",
                None,
            ),
            (
                "Which city did my sister move to?",
                "Where does my sibling live these days, after the relocation?",
                "I want to book a trip to see her - remind me where she settled?",
            ),
            f"My sister {name} called about our parents' anniversary party, nothing decided yet.",
        ),
        _Fact(
            "allergy",
            (
                f"Just so you know for any recipes: I'm allergic to "
                f"{rng.choice(('shellfish', 'sesame', 'hazelnuts', 'kiwi', 'mustard'))}. I found "
                "out the hard way at a friend's wedding and spent the night in the ER.",
                None,
            ),
            (
                "What am I allergic to?",
                "Is there any ingredient I have to avoid for medical reasons?",
                "Which food could send me to the hospital if you put it in a dish?",
            ),
            "I've been trying to eat less sugar, but the office keeps bringing in pastries.",
        ),
        _Fact(
            "flight",
            (
                f"Travel update: my flight to {city} leaves at {flight}. I still need to figure "
                "out how to get to the airport that early.",
                None,
            ),
            (
                f"When does my flight to {city} leave?",
                "What time does my plane take off on the trip?",
                "Remind me of my departure slot, I need to set an alarm.",
            ),
            "Airport lounges are overrated, honestly, I just want a quiet corner and a socket.",
            (flight, f"That's when my flight to {city} leaves; I still need a ride there."),
        ),
        _Fact(
            "wifi",
            (
                "My parents are visiting next week and I want a guest wifi password that's easy "
                "to read aloud over the phone. Can you suggest one?",
                f"How about '{rng.choice(_WORDS)}-{rng.choice(_WORDS)}-{rng.randint(10, 99)}'? "
                "Two ordinary words and a number are easy to say and to type on a phone, and "
                "still much harder to guess than a birthday.",
            ),
            (
                "What wifi password did you suggest for my guests?",
                "My dad is asking how to get online at my place - what did you come up with?",
                "Which passphrase did you propose for the visitors' network?",
            ),
            "The internet at home dropped out three times during my call today, so annoying.",
        ),
        _Fact(
            "dog",
            (
                f"We adopted a dog yesterday! A scruffy "
                f"{rng.choice(('terrier mix', 'greyhound', 'beagle', 'collie'))} named "
                f"{rng.choice(('Biscuit', 'Pickle', 'Juniper', 'Waffles', 'Nacho'))}. The kids "
                "are over the moon.",
                None,
            ),
            (
                "What's our new dog called?",
                "What name did we give the pet we just brought home?",
                "Remind me what the kids call the animal we adopted?",
            ),
            "The neighbour's dog barked all night again, I barely slept.",
        ),
        _Fact(
            "plate",
            (
                f"For the parking permit form: my new car's licence plate is {plate}. The form "
                "wants it exactly like that.",
                None,
            ),
            (
                "What's my car's licence plate?",
                "What is the registration number of my vehicle?",
                "The permit office is on the phone - what are the characters on my plate?",
            ),
            "Car insurance went up again this year, I should compare quotes.",
            (plate, "It's the licence plate of my new car, for the parking permit form."),
        ),
        _Fact(
            "dentist",
            (
                f"The dental practice just called and moved my appointment to {dentist}. Not "
                "ideal, but better than waiting another month.",
                None,
            ),
            (
                "When is my dentist appointment?",
                "When am I seeing the tooth doctor now?",
                "What day and time did my checkup get rescheduled to?",
            ),
            "I should really floss more, my gums were bleeding a bit this morning.",
            (dentist, "That's the new slot the dental practice gave me after they rescheduled."),
        ),
        _Fact(
            "anniversary",
            (
                f"Our wedding anniversary is on {anniversary}, and "
                "I somehow manage to forget it every year. This time I want to plan something "
                "proper.",
                None,
            ),
            (
                "When is our wedding anniversary?",
                "What date did my partner and I get married?",
                "Which day do I need to plan the celebration for us as a couple?",
            ),
            "A friend of mine is getting married in the spring and asked me to give a speech.",
            (anniversary, "That's our wedding anniversary, and I forget it every single year."),
        ),
        _Fact(
            "coffee",
            (
                f"If you ever order for me: my usual is a "
                f"{rng.choice(('small', 'medium', 'large'))} oat "
                f"{rng.choice(('flat white', 'cortado', 'latte', 'cappuccino'))} with an extra "
                "shot, no sugar.",
                None,
            ),
            (
                "What's my usual coffee order?",
                "How do I take my espresso drink?",
                "If you pick up a drink for me at the café, what should you get?",
            ),
            "I've cut down to two coffees a day and honestly I sleep better.",
        ),
        _Fact(
            "employee_id",
            (
                f"HR keeps asking, so for the record: my staff number at work is "
                f"{staff}. Please keep it handy for the expense forms.",
                None,
            ),
            (
                "What's my staff number at work?",
                "Which employee identifier should go on the expense claim?",
                "Payroll needs my ID - what is it?",
            ),
            "HR sent another survey about the office move, I ignored it again.",
            (staff, "That's my staff number at work, HR and payroll keep asking for it."),
        ),
        _Fact(
            "landlord",
            (
                f"Good news, my landlord {rng.choice(_NAMES)} {surname} finally fixed the heater "
                "after three weeks. I'll send him a thank-you note anyway.",
                None,
            ),
            (
                "What's my landlord's name?",
                "Who owns the flat I rent?",
                "Who should I write to about the lease renewal?",
            ),
            "Rent prices in my area are going up fast, I might have to move next year.",
        ),
        _Fact(
            "book_club",
            (
                f"For book club this month we're reading "
                f"'{rng.choice(('The Salt Path', 'Piranesi', 'Stoner', 'The Remains of the Day'))}"
                "'. I'm already behind, as usual.",
                None,
            ),
            (
                "Which book is my book club reading?",
                "What novel does my reading group have on the list right now?",
                "What am I supposed to finish before the next literary meetup?",
            ),
            "I started three books this summer and finished none of them.",
        ),
        _Fact(
            "teacher",
            (
                f"Parents' evening went well. My daughter's teacher this year is Ms. "
                f"{rng.choice(_SURNAMES)}, and she says the reading has really improved.",
                None,
            ),
            (
                "What's the name of my daughter's teacher?",
                "Who is in charge of my kid's class this year?",
                "Who should I email at school about the field trip form?",
            ),
            "School starts at eight, and getting everyone out of the door is chaos.",
        ),
        _Fact(
            "bike_lock",
            (
                "I bought a combination lock for my bike. Pick a random 3-digit code for me so "
                "I don't use my birthday again.",
                f"Let's go with {rng.randint(100, 999)}. It isn't a date or a repeated digit, so "
                "it's a decent choice; set it before you lock up the first time.",
            ),
            (
                "Which code did you pick for my bike lock?",
                "I'm at the rack outside - what numbers open my bicycle?",
                "What combination did you choose for me yesterday for the cycle chain?",
            ),
            "Someone stole the front wheel of a bike outside the library, scary.",
        ),
        _Fact(
            "meeting_room",
            (
                f"Quick note: the quarterly review is in room {rng.randint(2, 9)}."
                f"{rng.randint(10, 40)} on {rng.choice(_WEEKDAYS)}, and I'm presenting the "
                "budget slides.",
                None,
            ),
            (
                "Where is the quarterly review?",
                "In which room do I present the numbers to management?",
                "Where do I need to be for the big meeting with the budget slides?",
            ),
            "Meetings at work are getting longer and longer, nobody keeps to the agenda.",
        ),
        _Fact(
            "restaurant",
            (
                f"Our go-to place for date night is a little "
                f"{rng.choice(('Georgian', 'Ethiopian', 'Basque', 'Sichuan'))} restaurant "
                f"called {rng.choice(('Tamada', 'Lalibela', 'Txoko', 'Red Lantern'))}. We've been "
                "going there since our second date.",
                None,
            ),
            (
                "What's our favourite restaurant?",
                "Where do my partner and I usually go out to eat?",
                "Which place should I book for a romantic evening out?",
            ),
            "We tried a new pizza place downtown, it was fine but nothing special.",
        ),
        _Fact(
            "door_code",
            (
                f"The door code for my building changed today, it's now {door} "
                "followed by the hash key. The courier couldn't get in this morning.",
                None,
            ),
            (
                "What's the door code for my building?",
                "How does someone get through the entrance of my apartment block?",
                "A delivery driver is downstairs - what should they type to get in?",
            ),
            "The lift in my building has been broken for a week now.",
            (door, "That's the new door code for my building; the courier couldn't get in."),
        ),
        _Fact(
            "policy",
            (
                f"For the claim later: my home insurance policy number is "
                f"{policy}. The broker said to quote "
                "it in every email.",
                None,
            ),
            (
                "What's my insurance policy number?",
                "Which reference should I quote to the broker about the water damage?",
            ),
            "The broker's office never picks up the phone before ten.",
            (policy, "It's my home insurance policy number, for the water damage claim."),
        ),
        _Fact(
            "mom_birthday",
            (
                f"Mom's birthday is on {birthday}. I want to "
                "order flowers a week ahead this time instead of panicking the day before.",
                None,
            ),
            (
                "When is my mother's birthday?",
                "What date do I need to order the bouquet for?",
                "When is Mum's special day this year?",
            ),
            "My mom finally learned to use video calls, so we talk every Sunday now.",
            (birthday, "That's Mom's birthday - I want to order flowers a week ahead this time."),
        ),
        _Fact(
            "plant_watering",
            (
                f"The nursery said the fiddle leaf fig needs water every {rng.randint(6, 12)} days "
                "and should stay away from the radiator.",
                None,
            ),
            (
                "How often should I water the fiddle leaf fig?",
                "How many days between drinks for my big houseplant?",
            ),
            "Half of my balcony herbs died in the heatwave.",
        ),
        _Fact(
            "recipe_swap",
            (
                "I'm making your lentil soup for ten people on Saturday. What can I use instead "
                "of cream so it stays vegan?",
                f"Blend in {rng.choice(('soaked cashews', 'silken tofu', 'coconut milk'))}: about "
                "a cup for ten servings. Add it at the end and warm it through without boiling, "
                "or it can split.",
            ),
            (
                "What did you say to use instead of cream in the soup?",
                "For the big pot on Saturday, which dairy-free replacement did you recommend?",
                "What was your trick to keep the lentil dish plant-based?",
            ),
            "I burned the garlic again, the whole kitchen smelled for hours.",
        ),
        _Fact(
            "vet",
            (
                f"The vet clinic we use is {rng.choice(('Oakbridge', 'Riverside', 'Northgate'))} "
                f"Animal Care, and our vet is Dr. {rng.choice(_SURNAMES)}. Their emergency line "
                "is open all night.",
                None,
            ),
            (
                "Which vet clinic do we use?",
                "Who looks after our animals when they're sick?",
            ),
            "Pet food prices have gone up a lot this year.",
        ),
        _Fact(
            "gift_idea",
            (
                f"Note to self: {name} mentioned she really wants a "
                f"{rng.choice(('pasta maker', 'film camera', 'bread proofing basket'))} for her "
                "birthday. Don't let me forget that.",
                None,
            ),
            (
                f"What did {name} say she wants for her birthday?",
                "What present was I supposed to remember for my sister?",
            ),
            "Wrapping paper is such a waste, I've switched to cloth bags.",
        ),
    ]
