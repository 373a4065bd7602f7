"""Synthetic corpus of the first ``ioi-tiny`` (``train_ioi_tiny --corpus classic``; the shipped model is trained on
``corpus_repeated_name.py``): IOI sentences built to defeat the "last name before the end" shortcut, plus
non-IOI text (narratives, copying/induction sequences, a factual-recall table).

Pure Python (no torch): ``ioi_dataset`` is imported by other parts of interplab. ``corpus_repeated_name`` takes
its names, name-pair split, facts, ``ioi_dataset`` and the helpers that build a document (``_sample_parts``,
``_narrative``, ``_document``, ...) from here: the shipped model's training text goes through this module too.

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

# ---------------------------------------------------------------- templates: intro + middle + final clause
# The intro names the two candidates {A} and {B}. An optional middle mentions names in other roles. The final clause
# is MARKER + S2 + POST + ACTION: S2 (the subject, repeating one candidate) always follows a clause marker
# ("," "then" "so" "Later" ...), and no other name ever follows a marker. POST may hold a bystander or a candidate
# after S2, so S2 is often not the last name before the end, and its distance to the end varies; the middle may repeat
# either candidate, so name counts do not identify the answer either. The answer (the indirect object, IO) is the
# candidate that is not S2. Finding S2 needs its left context ("which name follows a marker?"), which a layer-0 head at
# the end cannot see: the information has to be formed at S2 and moved to the end by a later layer.
INTROS_TRAIN = [
    "When {A} and {B} went to the {place}",
    "As soon as {A} and {B} entered the {place}",
    "After {A} and {B} cleaned the {place}",
    "When {A} and {B} stopped by the {place}",
    "When {A} and {B} got a {obj} at the {place}",
    "After {A} and {B} arrived at the {place}",
    "While {A} and {B} were working at the {place}",
    "{A} and {B} went to the {place}",
    "Yesterday {A} and {B} had a long day at the {place}",
    "Since {A} and {B} were bored at the {place}",
    "{A} and {B} met at the {place}",
    "In the morning {A} and {B} had a lot of fun at the {place}",
]
INTROS_TEST = [
    "When {A} and {B} visited the {place}",
    "Before {A} and {B} left the {place}",
    "Once {A} and {B} reached the {place}",
]

# Middles: {X} and {Y} are filled with a bystander in evaluation prompts, and with any name (IO, S or a bystander)
# in training text. Names here follow ". ", "to", "saw", "with", never a marker.
MIDDLES = [
    "",
    "",
    ". It was late",
    ". {X} was tired",
    ". {X} talked to {Y} for a while",
    ". The {obj} was on the table. {X} saw it",
    ". It was sunny. {X} was happy",
    ". {X} sat with {Y}",
]
MARKERS = [",", ", then", ", so", ". Then", ". Later", ", and then", ". Afterwards"]

# Posts: text between S2 and the action; {Y} is a bystander in evaluation prompts, any name in training text.
POSTS_TRAIN = [
    "",
    "",
    " quickly",
    ", feeling generous,",
    " with {Y}",
    "'s friend {Y}",
    ", who had seen {Y} earlier,",
    " waved at {Y} and",
    " smiled at {Y}, talked for a while about the {obj}, and finally",
    " was tired, so he",
    " and the dog of {Y}",
]
POSTS_TEST = [
    ", who had talked to {Y} before,",
    " nodded to {Y} and",
    " happily",
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


def _sample_parts(rng: random.Random, held_out: bool, parts: list[tuple[list, list]]) -> tuple:
    """One part from each (training list, held-out list) of ``parts``, drawn in that order. Held out: each from
    both lists, drawn again until at least one comes from a held-out list; otherwise each from its training list."""
    while True:
        if not held_out:
            return tuple(rng.choice(train) for train, _ in parts)
        picked = tuple(rng.choice(train + test) for train, test in parts)
        if any(part in test for part, (_, test) in zip(picked, parts)):
            return picked


def _sample_template(rng: random.Random, held_out: bool) -> tuple[str, str, str, str, str]:
    """(intro, middle, marker, post, action); held out = at least one of intro, post, action from a test list."""
    middle, marker = rng.choice(MIDDLES), rng.choice(MARKERS)
    intro, post, action = _sample_parts(rng, held_out, [(INTROS_TRAIN, INTROS_TEST), (POSTS_TRAIN, POSTS_TEST),
                                                        (ACTIONS_TRAIN, ACTIONS_TEST)])
    return intro, middle, marker, post, action


def _candidates(rng: random.Random, test_pair: bool) -> tuple[str, str, str, str]:
    """(A, B, IO, S): the intro's two names in order, and which of them is the indirect object and which the
    subject (ABBA: S second in the intro, or BABA: S first, equally often)."""
    a, b = _sample_pair(rng, test_pair)
    io, s = (a, b) if rng.random() < 0.5 else (b, a)
    return a, b, io, s


def ioi_example(rng: random.Random, *, test_pair: bool = False, test_template: bool = False,
                max_mentions: int = 3) -> dict:
    """One IOI prompt: returns dict(prompt, corrupt, io, s); ``corrupt`` replaces S2 by the IO name.

    ``max_mentions=2`` (evaluation prompts): only bystanders in the middle and after S2, so S occurs twice and IO
    once. Otherwise (training text) those slots take any name, so S and IO may each occur up to three times.
    """
    a, b, io, s = _candidates(rng, test_pair)
    intro, middle, marker, post, action = _sample_template(rng, test_template)
    others = [n for n in NAMES if n not in (a, b)]
    c, d = rng.sample(others, 2)
    pick = (lambda: c) if max_mentions <= 2 else (lambda: rng.choice([io, s, c, d]))
    place = rng.choice(PLACES)
    obj, obj2 = rng.sample(OBJECTS, 2)
    head = (intro + middle).format(A=a, B=b, X=pick(), Y=pick(), place=place, obj=obj) + marker
    tail = (post + " " + action).format(Y=pick(), obj=obj, obj2=obj2)
    return {"prompt": f"{head} {s}{tail}", "corrupt": f"{head} {io}{tail}", "io": io, "s": s}


def ioi_dataset(n: int, split: str = "test", seed: int = 0, example=None) -> list[dict]:
    """``n`` IOI prompt pairs for patching: dicts {"clean", "corrupt", "answer", "wrong"}.

    ``split``: "test" (held-out name pairs on held-out templates, the default), "test_pairs", "test_templates" or
    "train". ``clean`` and ``corrupt`` differ only in the S2 name (a single token), so they tokenize to equal
    length; ``answer`` is the IO name with a leading space (the clean answer), ``wrong`` the subject.
    ``example``: the generator of one prompt (default: this corpus's ``ioi_example``).
    """
    example = example or ioi_example
    flags = {"train": (False, False), "test_pairs": (True, False), "test_templates": (False, True),
             "test": (True, True)}
    if split not in flags:
        raise ValueError(f"unknown split {split!r}: use one of {sorted(flags)}")
    test_pair, test_template = flags[split]
    rng = random.Random(f"ioi-{split}-{seed}")
    out = []
    for _ in range(n):
        ex = example(rng, test_pair=test_pair, test_template=test_template, max_mentions=2)
        out.append({"clean": ex["prompt"], "corrupt": ex["corrupt"], "answer": " " + ex["io"],
                    "wrong": " " + ex["s"]})
    return out


# ---------------------------------------------------------------- non-IOI text
# Short stories (str.format templates): {n}, {m} two names, {p}, {q} two places, {o} an object.
NARRATIVES = [
    "{n} went to the {p}. {n} bought a {o} and then walked to the {q}.",
    "In the morning {n} found a {o} at the {p}. It was very old.",
    "{n} and {m} like the {p}. Every day they go there with a {o}.",
    "The {o} was on the table in the {p}. {n} took it home.",
    "{n} said that the {p} was closed, so {m} went to the {q} instead.",
    "{n} has a {o}. {m} has a {o} too. They are happy.",
    "{n} called {m} from the {p}. {m} was at the {q}.",
    # the words of the held-out IOI templates occur here, outside IOI sentences
    "{n} visited the {p} before lunch and left the {q} after dinner.",
    "Once {n} reached the {p}, it was late.",
    "{n} lent the {o} and {m} brought a {o} back from the {q}.",
    "{n} nodded and happily talked about the {o}.",
    "{n}'s cousin lives near the {p}. {n} has talked to the cousin before.",
]


def _narrative(rng: random.Random, forms: list[str], places: list[str], objects: list[str]) -> str:
    n = rng.choice(NAMES)
    m = rng.choice([x for x in NAMES if x != n])
    p, q = rng.sample(places, 2)
    o = rng.choice(objects)
    return rng.choice(forms).format(n=n, m=m, p=p, q=q, o=o)


def narrative(rng: random.Random) -> str:
    """A short story about one or two people (one of ``NARRATIVES``)."""
    return _narrative(rng, NARRATIVES, PLACES, OBJECTS)


def _induction(rng: random.Random, vocab: list[str]) -> str:
    seq = [rng.choice(vocab) for _ in range(rng.randint(4, 12))]
    s = " ".join(seq)
    return f"{s}. {s}."


def induction(rng: random.Random) -> str:
    """A random word sequence repeated (copying / induction)."""
    return _induction(rng, NAMES + OBJECTS + PLACES + FILLER)


def fact(rng: random.Random) -> str:
    """A sentence that pairs a country with its capital (factual recall)."""
    country = rng.choice(list(FACTS))
    cap = FACTS[country]
    forms = [f"The capital of {country} is {cap}.", f"{cap} is the capital of {country}.",
             f"{cap} is in {country}.", f"The capital city of {country} is {cap}."]
    return rng.choice(forms)


def _document(rng: random.Random, p_ioi: float, ioi, others) -> tuple[str, str]:
    """A training document: with probability ``p_ioi`` the IOI prompt ``ioi(rng)`` as prefix and its answer (then
    an ending) as rest; otherwise, by a second uniform draw r, the first ``make(rng)`` of ``others`` [(bound,
    make), ...] whose bound exceeds r (the last bound is 1). ``make`` returns a whole text (rest empty) or (prefix,
    rest)."""
    r = rng.random()
    if r < p_ioi:
        ex = ioi(rng)
        ending = rng.choice([".", ". They were happy.", " at the end.", "."])
        return ex["prompt"], " " + ex["io"] + ending
    r = rng.random()
    text = next(make for bound, make in others if r < bound)(rng)
    return (text, "") if isinstance(text, str) else text


# 30% of the non-IOI documents narratives, 30% copying, 40% facts (the capitals are known well enough to steer
# between them)
OTHER_DOCUMENTS = [(0.3, narrative), (0.6, induction), (1.0, fact)]


def training_document(rng: random.Random, p_ioi: float = 0.6) -> tuple[str, str]:
    """(prefix, rest): for IOI documents ``prefix`` is the prompt and ``rest`` starts with the answer token;
    for other documents ``prefix`` is the whole text and ``rest`` is empty."""
    return _document(rng, p_ioi, ioi_example, OTHER_DOCUMENTS)


def _tokenizer_text(seed: int, n: int, document, places: list[str], objects: list[str]):
    rng = random.Random(f"tok-{seed}")
    words = NAMES + places + objects + list(FACTS) + list(FACTS.values()) + FILLER
    for _ in range(n):
        prefix, rest = document(rng)
        yield prefix + rest
    for _ in range(200):
        yield " " + " ".join(words) + " " + ". ".join(words)


def tokenizer_training_text(seed: int = 0, n: int = 20000):
    """Text for training the BPE tokenizer: the corpus plus every name/place/object/country many times, so each
    becomes one token with a leading space (" Mary")."""
    return _tokenizer_text(seed, n, training_document, PLACES, OBJECTS)
