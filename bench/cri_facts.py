"""Hand-curated, message-level evidence for the facts named by CRI's ``persona-1-base`` queries.

CRI (``cri-benchmark``) scores a memory system by asking an LLM judge whether what the system
returns supports each of a query's ``expected_relevant_facts`` (64 short phrases over 20 queries
``qrp-adv-01`` .. ``qrp-adv-20``, e.g. "flexitarian", "son Mateo, age 14", "purchased for
$368K"). Without an LLM this module gives a deterministic stand-in: for every expected fact, the
set of messages of the 2,862-message conversation that *state* that fact, so that a model given
one of them could answer that part of the question.

Method
------
Each fact maps to a tuple of *alternatives*; an alternative is a tuple of case-insensitive regexes
that must all ``re.search`` the message content (curly apostrophes are folded to ``'`` first). A
message is evidence for the fact if any alternative matches. The patterns were written from the
fact text and by reading the conversation (grepping it and reading the hits in context), never
from any retrieval system's output, and each was tightened until, on the matches read (all of
them, or a sample of 15 when there were more), at least ~90% genuinely state the fact. Facts about
the past ("previously strict vegan", "previously NYC and Austin") match messages that state that
past fact (him going vegan, living in or moving from NYC / Austin). Both roles count: an assistant
turn that restates a fact ("As a sustainability consultant who just quit corporate architecture")
is evidence, but patterns require the stated value, so an assistant question about a topic does
not match.

Limits
------
* Regexes over single messages: a fact spread over two turns ("Mateo -- is that your son?" /
  "Yeah, he's 14.") is credited to the turn that carries the value; pronoun-only turns ("She has
  kind eyes") match only where the wording is specific enough to be safe.
* Composite facts ("Mateo lives with Marcus, Sofia with Diana in NYC", "standard American diet to
  vegan to flexitarian", "previously NYC and Austin") match turns stating any one part or step;
  few turns state the whole.
* :data:`EXHIBITED_FACTS` are style facts no message states; their matchers list a few turns
  that *show* the trait unmistakably (a joke at his own expense, naming his own vulnerability).
  Drop them for a strict "stated" reading. "reflective" is ``None``: no turn states it, and
  nearly every turn of his could be said to show it.
* Precision figures are hand estimates on samples, recorded in ``bench/cri_facts_audit.md``.

Data notes
----------
* "Meridian Center" never occurs: the conversation speaks of the Meridian project (an energy
  campus, "Building B", for the client that first appears as Meridian Sustainable Design); the
  matcher takes Meridian + project words.
* Message 69 says "My dad was Puerto Rican, mom was American", while later turns call his
  mother Puerto Rican (1953, and the assistant's "Puerto Rican mom" lines); both count for
  "Puerto Rican-American".
* 13 of the 64 facts (Elena, the flexitarian turn, eggs / honey, Tom's barn, the greenhouse) are
  stated only in the last 300 messages (ids 2563-2862); "41" only up to message 1878.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

Alternatives = tuple[tuple[str, ...], ...]

# ---------------------------------------------------------------------------------------------
# Matchers shared by several facts
# ---------------------------------------------------------------------------------------------

#: He lives (or has moved / is moving) in rural Vermont near Stowe.
_VERMONT_HOME: Alternatives = (
    (r"twelve-acre farmhouse in Stowe|Stowe, Vermont",),
    (r"\b(mov(e|ed|ing)|relocat\w*) to (rural )?Vermont|Vermont move\b",),
    (r"\bjust moved from Texas|architect from Texas",),
    (r"\bI live in a farmhouse in Vermont|In a farmhouse\. In Vermont",),
    (r"Vermont homesteader|to (a )?Vermont farm\b|Come home to Vermont",),
    (r"first (full work week|meal|Vermont client|Vermont build)\b.{0,25}(Vermont|from)",),
    (r"first (Vermont client|Vermont build)|from my Vermont office|Vermont (kitchen|office)\b",),
    (
        r"\bI'll present from Vermont|run(ning)? (my practice|a business|an architecture practice)"
        r" from (rural Vermont|a farmhouse)",
    ),
    (r"welcome to Vermont, we take care of our own|Vermont embraced you",),
    (r"\bWe're here\. We made it\. The farmhouse",),
    (r"Mateo's first day at Stowe|Word travels fast in Stowe|new in town",),
)

#: He was a corporate architect at a Manhattan firm (before mid-June 2025).
_CORPORATE_ARCHITECT: Alternatives = (
    (r"architect\w* (at|with) (a|this|the|my) firm in (Manhattan|New York)",),
    (r"corporate architect", r"\b(left|quit|years|background|to consultant)\b"),
    (
        r"licensed architect in New York|New York[- ]trained architect|"
        r"hard-nosed New York architect|Manhattan architect",
    ),
    (r"\b(twelve|12) years (of|in) (architect|corporate)",),
    (r"\b(twelve|12) years of architectural practice",),
)

#: He went (strict) vegan / was vegan.
_VEGAN: Alternatives = (
    (r"\b(go(ing)?|went|gone) (fully )?vegan\b", r"\b(decided|I|you)\b"),
    (
        r"\b(day|week|weeks|month|months) (\w+ )?(of )?vegan\b",
        r"\b(one|two|three|four|five|six|almost|day|week)\b",
    ),
    (r"\bI'?m (a )?vegan\b|\bI am (a )?vegan\b|\bI'm vegan now|since you're vegan",),
    (r"\b(your|my) (strict )?vegan(ism)?\b (identity|path|diet|was born)|your strict veganism",),
    (r"so firm about veganism|learned to cook vegan|since going vegan|The vegan identity served",),
    (r"No meat, no dairy, no eggs",),
    (r"\bthe (vegan dad|vegan kitchen)\b|\bVegan dad\b|a vegan freezer|vegan at Franklin",),
    (r"\bhouse (is|will be) mostly vegan",),
    (r"\bI haven't cheated once",),
    (r"\bvegan\b", r"(this is who I am|It's just who I am|how I eat|There's no going back)"),
)

#: He is flexitarian: eats mostly plant-based plus local eggs / honey.
_FLEXITARIAN: Alternatives = (
    (r"flexitarian", r"(where I am|\bI am\b|to flexitarian|in practice|Some would call)"),
    (r"conscious flexible plant-based",),
)

_MOSTLY_PLANT: Alternatives = (
    (r"\b(95%|ninety-five percent) plant",),
    (r"mostly vegan, open to ethical exceptions",),
    (r"mostly plant-based with room for nuance",),
    (r"conscious flexible plant-based",),
)

#: He eats the local eggs Elena brings (from her neighbour's chickens).
_EATS_EGGS: Alternatives = (
    (r"I ate one of Elena's eggs|with Elena's eggs|whose eggs you eat",),
    (r"local egg from a chicken I could visit",),
    (r"allowing one local, ethical ingredient",),
)

_LOCAL_HONEY: Alternatives = (
    (r"\bhoney\b", r"(I bought a jar|jar of (local|wildflower) honey|honey supports the bees)"),
)

#: He is beginning a relationship with Elena (his new love interest).
_ELENA_ROMANCE: Alternatives = (
    (r"Elena", r"(flirt|Valentine|between you and Elena|touched my arm|smile suggests)"),
    (r"falling for a woman",),
    (r"This is definitely a date|^It's a date\b",),
    (r"noticed that I noticed|noticed anything about anyone since Diana",),
    (r"too soon to feel warm about someone|sign of deeper interest",),
    (r"longer than friends stand|between friendship and something more",),
    (r"Emoji-based courtship",),
    (r"since early Diana",),
    (r"signaling warmth|shared future without calling it that",),
    (r"^Not yet\. But maybe soon\. When the garden is ready",),
)

#: He and Diana separated (amicably, via mediation) and are divorcing.
_DIVORCED: Alternatives = (
    (r"\bdivorc",),
    (
        r"\bseparat(ed|ing|ion)\b",
        r"(Diana|\bwe\b|\bour\b|partners|marriage|Mom and Dad|co-parenting|custody|"
        r"mutually)",
    ),
    (r"(decided|agreed|decide) to separate|how you separate well|chose to separate",),
    (r"ex-wife|mediator",),
    (r"Married to separated|married man to single dad|a married man leaving",),
)

#: Diana (and Sofia) moved back to New York after the separation.
_DIANA_SOFIA_NYC: Alternatives = (
    (r"Sofia", r"\b(go back to|moves? to|thriving in) (New York|Brooklyn)"),
    (r"she moves to New York, Sofia goes with her",),
    (r"Sofia's school for New York",),
    (r"Diana", r"apartment in Brooklyn|Brooklyn apartment|She signed the lease"),
    (r"Diana's friends in New York are setting up the apartment",),
    (r"Diana and Sofia (get on a plane|leave)\b",),
    (r"They're gone\. I drove them to the airport",),
    (r"present father from a thousand miles away",),
)

#: Mateo stays with Marcus (single dad).
_MATEO_WITH_MARCUS: Alternatives = (
    (r"Mateo (wants to )?stays? with me",),
    (r"choice to stay in Austin",),
    (r"Just me and Mateo",),
    (r"\bsingle (dad|father|parent(ing)?)\b",),
    (r"in Austin with my son|farmhouse in Vermont with my son",),
)

#: He lived in New York City (Manhattan).
_NYC_HOME: Alternatives = (
    (r"\bWe live in New York|I love New York\. This is where I grew up",),
    (r"(our|my|a|the) (Manhattan|New York|NYC) apartment|apartment in (Manhattan|New York)",),
    (r"Midtown Manhattan\. I've been an architect",),
    (r"leaving New York|You left New York|left New York because",),
    (r"Back in New York\. The apartment|Last Saturday in New York",),
    (r"lived in New York|lived in Manhattan|New York is where you were|Puerto Rican New Yorker",),
    (r"(Manhattan|New York)\b.{0,40}\bto (an )?Austin (house|consultant)|Manhattan to Austin",),
    (r"In New York it was always|less than we spent in New York|in New York her whole life",),
    (r"Our mortgage here is crushing us",),
    (r"\$1\.2M (Manhattan )?apartment|from the apartment minus",),
)

#: He lived in Austin, Texas (Aug 2025 - Feb 2026).
_AUSTIN_HOME: Alternatives = (
    (r"\b(mov(e|ed|ing)|relocat\w*) to Austin",),
    (r"Austin (house|resident|chapter)\b|(my|our|the) Austin (house|home|kitchen|practice)",),
    (r"\b(I'?m|we'?re|I am|living|been) in (Austin|Texas)\b",),
    (r"Last (full )?(day|night) in Austin|leaving Austin|(just moved|architect) from Texas",),
    (r"\bmonths in (Texas|Austin)\b",),
    (r"Austin is (mine|where you are)",),
    (r"Manhattan\b.{0,40}\bto (an )?Austin",),
    (r"I love Austin",),
)

#: He moved NYC -> Austin -> Vermont (both former cities, or the moves between them).
_PREVIOUSLY_NYC_AUSTIN: Alternatives = (
    (
        r"(New York|Manhattan)",
        r"Austin",
        r"\b(I've lived|we lived|living in Texas|to an Austin house)\b",
    ),
    (r"Manhattan to Austin|Manhattan architect to Austin",),
    (r"Puerto Rican New Yorker living in Texas",),
    (r"New York is where you were\. Austin is where you are",),
    (r"(arrived here broken|going back to New York as a visitor)",),
    (r"\b(mov(e|ed|ing)|relocat\w*) to Austin",),
    (r"\bjust moved from Texas|architect from Texas|Mateo is leaving Austin",),
)

#: He is a (sustainable building) consultant.
_CONSULTANT: Alternatives = (
    (
        r"(\bI'?m|\bI am|\bas an?|Marcus Rivera,?( an?)?)\s+(independent\s+)?sustainab\w*\s+"
        r"(building\s+)?consultant",
    ),
    (r"pivot\w* to sustainable building consulting",),
    (r"Consulting on sustainable projects",),
    (r"\bindependent consultant\b",),
    (r"architect-turned-consultant|corporate architect to consultant|Austin consultant",),
    (r"my (consulting business|consulting brand|consulting practice)",),
)

_AFFORDABLE_HOUSING_PROPOSAL: Alternatives = (
    (
        r"affordable housing[^.!?]{0,40}\b(proposal|project|RFP|initiative|site plans|design|"
        r"shortlist|presentation|pitch)\b|\b(proposal|project|designing|design)\b[^.!?]{0,40}"
        r"affordable housing",
    ),
    (r"housing (authority )?(proposal|presentation|pitch)\b",),
    (r"\b200[- ]units?\b",),
    (r"Housing Authority", r"(shortlist|presentation|proposal|project|pitch|RFP)"),
)

_TOM_BARN: Alternatives = (
    (r"\bTom\b", r"\bbarn\b"),
    (r"Barn (concept|renovation design)|barn conversion done right|barn in Vermont, you honor",),
    (r"Barn-to-event-space|The barn begins",),
)

_GREENHOUSE_WITH_ELENA: Alternatives = (
    (r"greenhouse (extension|designs?)", r"(Elena|\bwe\b|help her|together)"),
    (r"collaborative project between an architect and a botanist",),
)

_MERIDIAN: Alternatives = (
    (
        r"Meridian",
        r"(project|campus|drawings|design development|energy (model|data|systems)|LEED|expansion|"
        r"punch list|HVAC|site (survey|analysis)|floor plans|invoic|video call|client call|"
        r"package|mixed-use|pipeline|collaboration|kickoff|Rachel)",
    ),
    (r"energy campus|Building B\b",),
)

_HOUSING_ACTIVIST: Alternatives = (
    (r"city council|council (meeting|speech|member)|public comment",),
    (r"(housing|political) (advocacy|activis|engagement)|politically active|political awakening",),
    (r"apolitical to engaged|speaking up in housing meetings|get involved locally",),
    (r"civic conviction|That's citizenship|housing policy is personal",),
    (r"conservation commission", r"(meeting|invited|interested in attending)"),
    (r"introduced myself as a sustainable architect",),
)

_ADVISORY_COMMITTEE: Alternatives = (
    (
        r"advisory committee",
        r"(join|kicks off|meeting|present|continue|remotely|Jim|seat at the table|only practicing)",
    ),
    (
        r"(continue on|attending|presence on|I'm the only practicing architect on) (that |the )?"
        r"committee",
    ),
    (r"The committee is fine with me attending remotely",),
)

_APOLITICAL: Alternatives = (
    (r"stay(ed)? out of politics|apolitical|tune it all out|privilege-based apathy",),
    (r"usually ignore that stuff|disengaged to|Disengaged to politically active",),
    (r"without worrying about policy",),
)

_MEDITATION: Alternatives = (
    (r"\b(I|I've|I'm)\b(?![^.?!]{0,20}\bnever\b)[^.?!]{0,40}\bmeditat",),
    (
        r"(^|[.!?]\s+)((Morning|Sunday|Monday|Thursday|Friday|Long|First|Second|Third|Cold)\s+)?"
        r"meditat(ion|ed|ing)\b",
    ),
    (r"\byour (morning |daily |meditation )?(meditation|practice)\b", r"meditat"),
    (r"\bA meditator\b",),
)

_MEDITATES_MORNING: Alternatives = (
    (
        r"(?s)^(?!.*Did you meditate)",
        r"meditat",
        r"(sunrise|dawn|\bmorning\b|5:30|\b5 ?am\b|\bat five\b|\bUp at five\b|"
        r"\bwake up at 5\b|before the alarm)",
    ),
)

_FOOD = (
    r"(soup|curry|chili|dal|tacos?|stir-fry|scramble|noodles|pancakes|dinner|breakfast|meal|"
    r"feast|ramen|risotto|bread|stew|enchiladas|mousse|pad thai|stroganoff|minestrone|tempeh|"
    r"tofu|lentil|batch|wellington|peas|oatmeal|Dutch oven|nuggets|sauce)"
)

#: A sentence in which he makes / cooks a dish.
_COOK_SENTENCE = (
    r"((^|[.!?]\s+)(Made|Cooked|Making|Baked|Cooking)\b|\bI (made|cooked|cook|baked)\b)"
    r"[^.!?]{0,60}" + _FOOD
)

_COOKING: Alternatives = (
    (_COOK_SENTENCE,),
    (r"\bI learned to cook|teaching Mateo to cook|cooked together|I'm cooking\b",),
    (r"\b(your|my) (vegan )?cooking\b|Cooking as (love language|meditation)|\bA cook\b",),
    (r"I cook, he studies|me cooking every night",),
)

_COOKS_EVENINGS: Alternatives = (
    (_COOK_SENTENCE, r"\b(dinner|tonight|evening|last night)\b"),
    (r"cooked together tonight|I'm cooking\.", r"\b(dinner|tonight)\b"),
    (r"me cooking every night|I cook, he studies|cook dinner together",),
)

_HIKING: Alternatives = (
    (
        r"(Took|took|went|go) (the family |everyone |the whole family )?(to|for a long walk in) "
        r"(Barton Creek|the greenbelt|Mount Bonnell)",
    ),
    (r"walk in the greenbelt|We went to the greenbelt",),
    (r"walk on the Long Trail|Walking a forest trail",),
    (r"Barton Creek sounds perfect",),
)

_GARDENING: Alternatives = (
    (r"\b(my|your|porch|the porch) (herb |meditation |spring |kitchen )?garden\b",),
    (r"herb garden on the porch|the porch and the herb garden|garden he watched you plant",),
    (r"seed-starting station|start planning the spring garden|garden advice you now follow",),
    (r"winterize a garden bed|The garden will be waiting|Fresh basil from my own windowsill",),
    (
        r"meditation garden (I want to build|\? I'm thinking)|"
        r"plants are best for a meditation garden",
    ),
    (r"turning me into an actual farmer",),
)

_HOME_OFFICE: Alternatives = (
    (r"home office",),
    (r"\bwork(ing)? from (home|the farmhouse|Vermont)\b",),
    (r"(setting up|set up) my office|Office is set up|my office in the (garage|main bedroom)",),
    (r"(my|your) (Vermont|farmhouse|garage) office|farmhouse office|Office with a mountain view",),
    (r"mountain view(s)? from (the|your) desk|office by 8|what will be my office",),
)

_VIDEO_CALLS: Alternatives = (
    (r"video (call|link)|rehearsed over video|meetings are on Zoom|client call\b",),
    (r"client interaction is already virtual",),
)

_SMART_HOME_TO_SIMPLE: Alternatives = (
    (r"smart home|Alexa in every room",),
    (r"quieter life|a slower pace|Vermont pace|pace you're building here",),
    (r"wood stove (meditation|chili)|start the wood stove|wood stove going|wood stove barely",),
    (r"My New York self would not recognize me|Now I have living plants",),
    (r"Wood stove, wool blankets",),
)

_DELETED_SOCIAL_MEDIA: Alternatives = (
    (r"deleted all my social media|social media is toxic|all accounts including LinkedIn",),
    (r"I don't need an algorithm",),
)

_BURNOUT: Alternatives = (
    (r"burn(ed)?[- ]?out",),
    (r"\bnumb\b", r"(firm|job|office|I used to care|old Marcus|Nine months ago|^Honestly)"),
    (r"dying in that office|work itself has gotten stale|hating my job",),
)

_SUSTAINABILITY_VALUES: Alternatives = (
    (
        r"sustainab\w*",
        r"(It's what I believe in|your sustainability values|"
        r"sustainability isn't part of their future|couldn't do meaningful sustainable|"
        r"sustainable design I left the firm|I left corporate)",
    ),
    (r"clients aren't asking for that",),
    (r"This is what I left the firm for\. Not just sustainable",),
)

_FIRM_REJECTED: Alternatives = (
    (r"clients aren't asking for that",),
    (r"Five minutes for three weeks of work",),
    (r"pat on the head",),
    (r"rejects? your sustainability proposal",),
    (r"pitching a version of architecture to people who don't want it",),
)

_BUILD_THINGS_THAT_MATTER: Alternatives = (
    (r"build(ing)? (something|things) that (matter|actually help)|buildings that matter",),
    (r"actually contributing|developer's profit margin",),
    (r"Things that matter to the people who use them",),
    (r"I left the firm (to do|for)|what I left the firm for|couldn't do meaningful sustainable",),
    (r"not a legacy, that's a placeholder",),
)

_HOUSING_FOR_EVERYONE: Alternatives = (
    (r"housing for everyone|housing that ordinary people can afford",),
    (r"for people who need it most|families who deserve natural light",),
    (r"natural light is not a luxury",),
    (r"affordable housing (work )?feeds the soul|why I care about affordable housing",),
    (
        r"affordable housing[^.!?]{0,60}\b(mission|calling|promise|passion|personal)\b|"
        r"\b(mission|calling|promise|passion|personal)\b[^.!?]{0,60}affordable housing",
    ),
    (r"passion or displacement|The personal motivation is clear",),
    (r"neighborhood (I wish )?my dad|neighborhood my dad deserved",),
)

_ENVIRONMENT: Alternatives = (
    (r"help(s)? the planet|for the planet|better for the planet",),
    (r"don't care about carbon|largest category of personal emissions",),
    (r"designs sustainable buildings, it feels hypocritical",),
    (r"sustainab\w*", r"(what I believe|believe in|your sustainability values|why I love)"),
    (r"It's what I believe in",),
)

_PRESENT_FOR_KIDS: Alternatives = (
    (r"present (father|dad|parent)|present for (your|my|the|his) (family|kids)",),
    (r"not being present (for|with)|but to be present\b",),
    (r"someone they look up to|version of their dad",),
    (r"I'm here when they get home|being home when your kids",),
    (r"just presence|With presence\.|showing up for your kids",),
    (r"How do I be a good father",),
    (r"presence", r"(Sofia got her dad|family rituals|family breakfast)"),
)

_FARMHOUSE: Alternatives = ((r"\bfarmhouse\b",),)

_HIS_BARN: Alternatives = (
    (r"\bbarn\b", r"(studio|hayloft|\$375|farmhouse)"),
    (r"creek behind the barn|claimed the barn",),
)

_MOUNTAIN_VIEWS: Alternatives = (
    (
        r"(?s)^(?!.*(wall of glass|glass wall|Airbnb|Tom\b))",
        r"(mountain views?|views? of Mount Mansfield|Mount Mansfield in the background|"
        r"setting over Mount Mansfield|views from every window are mountains|mountains pink|"
        r"Blanket, coffee, mountains)",
    ),
)

_ELENA_BOTANIST: Alternatives = ((r"botan", r"(Elena|she|She's|a botanist who|her)"),)

_ELENA_STORE: Alternatives = (
    (r"Elena", r"(general store|run the store|behind the store|for the store)"),
    (r"general store owner|left academia to run the store|she runs the store",),
    (r"I'm Elena",),
)

_ELENA_GREENHOUSE: Alternatives = (
    (r"(her|huge|her own) greenhouse|greenhouse (is )?attached|Greenhouse cottage",),
    (r"greenhouse extension for the store",),
)

# ---------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------

#: query_id -> expected fact (verbatim from ground_truth.json) -> matcher alternatives
CRI_FACT_MATCHERS: dict[str, dict[str, Alternatives | None]] = {
    "qrp-adv-01": {
        "Sustainable Building Consultant": _CONSULTANT,
        "previously corporate architect in NYC": _CORPORATE_ARCHITECT,
        "Rivera Sustainable Design": ((r"Rivera Sustainable Design",),),
    },
    "qrp-adv-02": {
        "rural Vermont near Stowe": _VERMONT_HOME,
        "farmhouse with barn": (
            (r"\bfarmhouse\b", r"\bbarn\b"),
            *_HIS_BARN,
        ),
        "previously NYC and Austin": _PREVIOUSLY_NYC_AUSTIN,
    },
    "qrp-adv-03": {
        "beginning relationship with Elena": _ELENA_ROMANCE,
        "divorced from Diana": _DIVORCED,
    },
    "qrp-adv-04": {
        "son Mateo, age 14": (
            (r"\b(he'?s|he is|mateo is|mateo,? age|son is|at) (14|fourteen)\b",),
            (r"\b(14|fourteen)[- ]year[- ]olds?\b",),
            (r"fourteen years old",),
            (r"\b(classic|peak) (14|fourteen)\b",),
            (r"\bHe's fifteen (next month|in March)",),
            (r"Mateo Rivera, age 14",),
        ),
        "daughter Sofia, age 9": (
            (r"\b(nine|9)[- ]year[- ]old",),
            (r"\b(she'?s|she is|sofia is|sofia,? age) (9|nine)\b",),
            (r"gift of nine|normal at nine|Nine is the best age",),
        ),
        "Mateo lives with Marcus, Sofia with Diana in NYC": (
            *_DIANA_SOFIA_NYC,
            *_MATEO_WITH_MARCUS,
        ),
    },
    "qrp-adv-05": {
        "flexitarian": _FLEXITARIAN,
        "mostly plant-based": _MOSTLY_PLANT,
        "previously strict vegan": _VEGAN,
        "eats local eggs and honey": (*_EATS_EGGS, *_LOCAL_HONEY),
    },
    "qrp-adv-06": {
        "meditation": _MEDITATION,
        "cooking": _COOKING,
        "hiking": _HIKING,
        "gardening": _GARDENING,
    },
    "qrp-adv-07": {
        "affordable housing proposal": _AFFORDABLE_HOUSING_PROPOSAL,
        "barn conversion for Tom": _TOM_BARN,
        "greenhouse design with Elena": _GREENHOUSE_WITH_ELENA,
        "Meridian Center": _MERIDIAN,
    },
    "qrp-adv-08": {
        "housing and environmental activist": _HOUSING_ACTIVIST,
        "serves on advisory committee": _ADVISORY_COMMITTEE,
        "previously apolitical": _APOLITICAL,
    },
    "qrp-adv-09": {
        "moved from smart home enthusiast to simpler living": _SMART_HOME_TO_SIMPLE,
        "deleted social media": _DELETED_SOCIAL_MEDIA,
        "uses video calls for work": _VIDEO_CALLS,
    },
    "qrp-adv-10": {
        "meditates at sunrise": _MEDITATES_MORNING,
        "works from home office": _HOME_OFFICE,
        "cooks in evenings": _COOKS_EVENINGS,
    },
    "qrp-adv-11": {
        "New York City": _NYC_HOME,
        "Austin, Texas": _AUSTIN_HOME,
        "rural Vermont": _VERMONT_HOME,
    },
    "qrp-adv-12": {
        "burnout": _BURNOUT,
        "sustainability values": _SUSTAINABILITY_VALUES,
        "firm rejected his proposals": _FIRM_REJECTED,
        "wanted to build things that matter": _BUILD_THINGS_THAT_MATTER,
    },
    "qrp-adv-13": {
        "self-deprecating humor": (
            (r"most married-man answer of all time",),
            (r"I feel ridiculous . Marcus Rivera, hard-nosed New York architect",),
            (r"I'm an architect, I only know the Latin for concrete",),
            (r"still panic every birthday",),
            (r"the terrible one, as planned",),
        ),
        "reflective": None,
        "emotionally open": (
            (r"Admitting I can't work because I'm sad",),
            (r"vulnerability in a professional context",),
            (r"Nothing like emotional vulnerability",),
            (r"remarkably honest thing to admit",),
        ),
    },
    "qrp-adv-14": {
        "Puerto Rican-American": (
            (r"Puerto Ric",),
            (r"\bbicultural\b",),
        ),
        "mom made sofrito and pernil": (
            (r"\b(sofrito|pernil)\b", r"\b(Mom|mother|Abuela|she|her)\b"),
        ),
        "dad grew up in Puerto Rico": (
            (r"\b(dad|father)", r"(Humacao|Puerto Ric)"),
            (r"Humacao",),
        ),
    },
    "qrp-adv-15": {
        "farmhouse near Stowe Vermont": _FARMHOUSE,
        "barn": _HIS_BARN,
        "purchased for $368K": ((r"\$?368(,000|K)\b",),),
        "mountain views": _MOUNTAIN_VIEWS,
    },
    "qrp-adv-16": {
        "standard American diet to vegan to flexitarian": (
            (r"Standard diet to vegan to flexitarian",),
            (r"unconscious standard eating to conscious strict veganism",),
            (r"I eat whatever's fast and nearby",),
            (r"In New York it was always grab a slice|In Manhattan you ate what was fast",),
            (r"I used to just shove food in my face",),
            (r"eating whatever was fastest", r"vegan"),
            (r"No meat, no dairy, no eggs",),
            (r"better than the meat version we used to make",),
            (r"so firm about veganism",),
            (r"From 'no animal products, this is who I am now' to",),
            *_FLEXITARIAN,
        ),
        "eats local eggs from Elena's neighbor": (
            *_EATS_EGGS,
            (r"brought fresh eggs", r"neighbor"),
        ),
        "uses local honey": _LOCAL_HONEY,
    },
    "qrp-adv-17": {
        "divorced from Diana": _DIVORCED,
        "developmental mismatch": (
            (r"developmental mismatch|incompatible growth",),
            (r"\b(grow(ing)?|grew) apart\b", r"(Diana|we|marriage|She|They)"),
            (r"grow in different directions|paths have diverged|growth creating divergence",),
        ),
        "Diana moved to NYC with Sofia": _DIANA_SOFIA_NYC,
        "now beginning relationship with Elena": _ELENA_ROMANCE,
    },
    "qrp-adv-18": {
        "affordable housing for everyone": _HOUSING_FOR_EVERYONE,
        "environmental sustainability": _ENVIRONMENT,
        "being present for his kids": _PRESENT_FOR_KIDS,
    },
    "qrp-adv-19": {
        "41": ((r"\bI'm 41\b|forty-one years old|at forty-one\b|after forty-one years",),),
    },
    "qrp-adv-20": {
        "botanist": _ELENA_BOTANIST,
        "runs general store in Stowe": _ELENA_STORE,
        "Marcus's new love interest": _ELENA_ROMANCE,
        "has a greenhouse": _ELENA_GREENHOUSE,
    },
}

#: Style facts that no message states; their matchers list turns that *show* the trait.
EXHIBITED_FACTS: frozenset[tuple[str, str]] = frozenset(
    {
        ("qrp-adv-13", "self-deprecating humor"),
        ("qrp-adv-13", "emotionally open"),
    }
)

#: the roles whose messages count as evidence (every fact: no fact is restricted to one role)
_BOTH_ROLES = frozenset({"user", "assistant"})


@cache
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


def _matches(text: str, alternatives: Alternatives) -> bool:
    return any(all(_compiled(p).search(text) for p in alt) for alt in alternatives)


def fact_evidence(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, tuple[int, ...]]]:
    """query_id -> fact -> sorted ``message_id`` s of the rows that state the fact.

    ``rows`` are CRI ``conversations.jsonl`` records (``message_id``, ``role``, ``content``).
    A fact whose matcher is ``None`` maps to ``()``.
    """
    texts = [
        (int(r["message_id"]), str(r["role"]), str(r["content"]).replace("\u2019", "'"))
        for r in rows
    ]
    out: dict[str, dict[str, tuple[int, ...]]] = {}
    for qid, facts in CRI_FACT_MATCHERS.items():
        out[qid] = {}
        for fact, alternatives in facts.items():
            if alternatives is None:
                out[qid][fact] = ()
                continue
            out[qid][fact] = tuple(
                sorted(
                    mid
                    for mid, role, text in texts
                    if role in _BOTH_ROLES and _matches(text, alternatives)
                )
            )
    return out
