"""Synthetic corpus for ``ioi-tiny``: IOI sentences built to defeat the "last name before the end" shortcut, plus
non-IOI text (narratives, copying/induction sequences, a factual-recall table).

Pure Python (no torch): ``ioi_dataset`` is imported by other parts of interplab.

Splits. Name pairs are split by a stable hash (about 1 in 5 unordered pairs is held out), and templates are
built from three parts (intro, middle, action); a template is *held out* when any of its parts comes from a
held-out list. Training IOI text only uses training pairs with training templates.

=============== ====================== ==========================
split           name pairs             templates
=============== ====================== ==========================
train           training pairs         training templates
test_pairs      held-out pairs         training templates
test_templates  training pairs         held-out templates
test            held-out pairs         held-out templates
=============== ====================== ==========================

Evaluation prompts mention the subject exactly twice (S1 in the intro, S2 later) and the IO once, so the corrupt
prompt (S2 replaced by the IO name) has the opposite answer. Training text also mentions the subject three times,
or the IO twice (before S2), so that counting names does not identify the answer.
"""

from __future__ import annotations

import random
import zlib

EOS = "<|endoftext|>"

NAMES = """Mary John Alice Bob Sarah James Emma David Anna Michael Laura Daniel Kate Paul Lisa Mark Susan Peter
Rachel Tom Linda Steve Karen Chris Jessica Brian Amy Kevin Nancy Jason Emily Eric Helen Ryan Julia Adam Sophie Luke
Grace Sam Rose Jack Ruth Henry Claire Frank Diana Oscar Nina Victor Olivia Simon Hannah George Lucy Max Sandra Alex
Maria Carl Jane Dan Megan Ben Amber Greg Carol Ian Lily Tim Anne Joe Eva Fred Molly Jim Ella Leo Vera Ray
Iris""".split()

PLACES = """store park school office hospital station restaurant garden library beach market kitchen museum church
house lake bank theater hotel farm""".split()

OBJECTS = """drink book ring bone basketball kiss snack letter apple pencil bottle cake flower computer necklace
ticket key bag hat candle""".split()

FACTS = {
    "France": "Paris", "Germany": "Berlin", "Italy": "Rome", "Spain": "Madrid", "Japan": "Tokyo",
    "China": "Beijing", "Russia": "Moscow", "Egypt": "Cairo", "Canada": "Ottawa", "Greece": "Athens",
    "Ireland": "Dublin", "Austria": "Vienna", "Norway": "Oslo", "Sweden": "Stockholm", "Poland": "Warsaw",
    "Portugal": "Lisbon", "Kenya": "Nairobi", "Peru": "Lima", "Cuba": "Havana", "Chile": "Santiago",
}

FILLER = """the a and then went saw big small red blue old new happy sad very quite walked ran looked found took
made said day night morning evening city road tree dog cat car door window table chair water fire stone bird
sun moon rain snow""".split()

# ---------------------------------------------------------------- templates: intro + middle + action
# intro mentions {A} and {B}; middle mentions the subject {S} (S2) and maybe a bystander {C} (after S2); the
# action ends with "to" and the answer (the indirect object, IO) follows.
INTROS_TRAIN = [
    "When {A} and {B} went to the {place},",
    "As soon as {A} and {B} entered the {place},",
    "After {A} and {B} cleaned the {place},",
    "When {A} and {B} stopped by the {place},",
    "Later that day {A} and {B} walked into the {place}, and",
    "When {A} and {B} got a {obj} at the {place},",
    "After {A} and {B} arrived at the {place},",
    "While {A} and {B} were working at the {place},",
    "{A} and {B} went to the {place}, and then",
    "The {place} was busy when {A} and {B} arrived, and",
    "Yesterday {A} and {B} had a long day at the {place}, and then",
    "Since {A} and {B} were bored at the {place},",
    "{A} and {B} met at the {place}, where",
    "Then, {A} and {B} had a lot of fun at the {place}. Afterwards",
]
INTROS_TEST = [
    "When {A} and {B} visited the {place},",
    "Before {A} and {B} left the {place},",
    "Once {A} and {B} reached the {place},",
]

# (template, number of subject mentions it adds). {S3} is a third mention of the subject.
MIDDLES_TRAIN = [
    " {S}",
    " {S}",
    " {S} and {C}",
    " {S}'s friend {C}",
    " {S}, who had seen {C} earlier,",
    " {S} waved at {C} and then",
    " {S}, feeling generous,",
    " {S} quickly",
    " {S} smiled at {C}, talked for a while about the {obj}, and finally",
    " {S} was tired, so {S3}",
    " {S} and {C} laughed. Then {S3}",
    " {S} met {C}. Later {S3}",
    # the IO is mentioned again before S2: name counts no longer identify the answer; the rule is "the candidate
    # that is not the subject of the last clause"
    " {IO2} laughed, and then {S}",
    " {IO2} was hungry, so {S}",
    " {IO2} sat down. Then {S}",
    " {IO2} smiled at {C}, and {S}",
    " {IO2} and {C} were tired, so {S}",
]
MIDDLES_TEST = [
    " {S}, who had talked to {C} before,",
    " {S} nodded to {C} and",
    " {S} happily",
    " {S}'s cousin {C}",
]

ACTIONS_TRAIN = [
    "gave a {obj2} to", "handed the {obj2} to", "passed the {obj2} to", "said goodbye to", "threw the {obj2} to",
    "sent a {obj2} to", "showed the {obj2} to", "offered a {obj2} to", "sold a {obj2} to", "returned the {obj2} to",
    "mailed a {obj2} to", "tossed the {obj2} to", "delivered a {obj2} to", "gave the {obj2} back to",
    "read a {obj2} to", "sang a song to", "carried the {obj2} over to", "wrote a letter to",
]
ACTIONS_TEST = ["brought a {obj2} to", "lent the {obj2} to"]


def _pair_is_test(a: str, b: str) -> bool:
    x, y = sorted((a, b))
    return zlib.crc32(f"{x}|{y}".encode()) % 5 == 0


def _sample_pair(rng: random.Random, test: bool) -> tuple[str, str]:
    while True:
        a, b = rng.sample(NAMES, 2)
        if _pair_is_test(a, b) == test:
            return a, b


def _sample_template(rng: random.Random, held_out: bool, max_mentions: int = 3) -> tuple[str, str, str]:
    middles_train = [m for m in MIDDLES_TRAIN if max_mentions >= 3 or ("{S3}" not in m and "{IO2}" not in m)]
    while True:
        if held_out:
            intro = rng.choice(INTROS_TRAIN + INTROS_TEST)
            middle = rng.choice(middles_train + MIDDLES_TEST)
            action = rng.choice(ACTIONS_TRAIN + ACTIONS_TEST)
            if intro in INTROS_TEST or middle in MIDDLES_TEST or action in ACTIONS_TEST:
                return intro, middle, action
        else:
            return rng.choice(INTROS_TRAIN), rng.choice(middles_train), rng.choice(ACTIONS_TRAIN)


def ioi_example(rng: random.Random, *, test_pair: bool = False, test_template: bool = False,
                max_mentions: int = 3) -> dict:
    """One IOI prompt: returns dict(prompt, corrupt, io, s). ``corrupt`` replaces S2 (and later mentions) by IO."""
    a, b = _sample_pair(rng, test_pair)
    io, s = (a, b) if rng.random() < 0.5 else (b, a)  # ABBA (S second in the intro) or BABA (S first)
    intro, middle, action = _sample_template(rng, test_template, max_mentions)
    c = rng.choice([n for n in NAMES if n not in (a, b)])
    place = rng.choice(PLACES)
    obj, obj2 = rng.sample(OBJECTS, 2)
    head = intro.format(A=a, B=b, place=place, obj=obj)
    tail = (middle + " " + action).format(S="{S}", S3="{S}", IO2=io, C=c, obj=obj, obj2=obj2)
    return {"prompt": head + tail.replace("{S}", s), "corrupt": head + tail.replace("{S}", io), "io": io, "s": s}


def ioi_dataset(n: int, split: str = "test", seed: int = 0) -> list[dict]:
    """``n`` IOI prompt pairs for patching: dicts {"clean", "corrupt", "answer", "wrong"}.

    ``split``: "test" (held-out name pairs on held-out templates, the default), "test_pairs", "test_templates" or
    "train". ``clean`` and ``corrupt`` differ only in the S2 name (a single token), so they tokenize to equal
    length; ``answer`` is the IO name with a leading space (the clean answer), ``wrong`` the subject.
    """
    flags = {"train": (False, False), "test_pairs": (True, False), "test_templates": (False, True),
             "test": (True, True)}
    if split not in flags:
        raise ValueError(f"unknown split {split!r}: use one of {sorted(flags)}")
    test_pair, test_template = flags[split]
    rng = random.Random(f"ioi-{split}-{seed}")
    out = []
    for _ in range(n):
        ex = ioi_example(rng, test_pair=test_pair, test_template=test_template, max_mentions=2)
        out.append({"clean": ex["prompt"], "corrupt": ex["corrupt"], "answer": " " + ex["io"],
                    "wrong": " " + ex["s"]})
    return out


# ---------------------------------------------------------------- non-IOI text
def narrative(rng: random.Random) -> str:
    n = rng.choice(NAMES)
    m = rng.choice([x for x in NAMES if x != n])
    p, q = rng.sample(PLACES, 2)
    o = rng.choice(OBJECTS)
    forms = [
        f"{n} went to the {p}. {n} bought a {o} and then walked to the {q}.",
        f"In the morning {n} found a {o} at the {p}. It was very old.",
        f"{n} and {m} like the {p}. Every day they go there with a {o}.",
        f"The {o} was on the table in the {p}. {n} took it home.",
        f"{n} said that the {p} was closed, so {m} went to the {q} instead.",
        f"{n} has a {o}. {m} has a {o} too. They are happy.",
        f"{n} called {m} from the {p}. {m} was at the {q}.",
        # the words of the held-out IOI templates occur here, outside IOI sentences
        f"{n} visited the {p} before lunch and left the {q} after dinner.",
        f"Once {n} reached the {p}, it was late.",
        f"{n} lent the {o} and {m} brought a {o} back from the {q}.",
        f"{n} nodded and happily talked about the {o}.",
        f"{n}'s cousin lives near the {p}. {n} has talked to the cousin before.",
    ]
    return rng.choice(forms)


def induction(rng: random.Random) -> str:
    """A random word sequence repeated (copying / induction)."""
    vocab = NAMES + OBJECTS + PLACES + FILLER
    seq = [rng.choice(vocab) for _ in range(rng.randint(4, 12))]
    s = " ".join(seq)
    return f"{s}. {s}."


def fact(rng: random.Random) -> str:
    country = rng.choice(list(FACTS))
    cap = FACTS[country]
    forms = [f"The capital of {country} is {cap}.", f"{cap} is the capital of {country}.",
             f"{cap} is in {country}.", f"The capital city of {country} is {cap}."]
    return rng.choice(forms)


def training_document(rng: random.Random, p_ioi: float = 0.6) -> tuple[str, str]:
    """(prefix, rest): for IOI documents ``prefix`` is the prompt and ``rest`` starts with the answer token;
    for other documents ``prefix`` is the whole text and ``rest`` is empty."""
    r = rng.random()
    if r < p_ioi:
        ex = ioi_example(rng)
        ending = rng.choice([".", ". They were happy.", " at the end.", "."])
        return ex["prompt"], " " + ex["io"] + ending
    r = rng.random()
    if r < 0.4:
        return narrative(rng), ""
    if r < 0.75:
        return induction(rng), ""
    return fact(rng), ""


def tokenizer_training_text(seed: int = 0, n: int = 20000):
    """Text for training the BPE tokenizer: the corpus plus every name/place/object/country many times, so each
    becomes one token with a leading space (" Mary")."""
    rng = random.Random(f"tok-{seed}")
    words = NAMES + PLACES + OBJECTS + list(FACTS) + list(FACTS.values()) + FILLER
    for _ in range(n):
        prefix, rest = training_document(rng)
        yield prefix + rest
    for _ in range(200):
        yield " " + " ".join(words) + " " + ". ".join(words)
