"""Corpus of the shipped ``ioi-tiny`` (issue 15; the first ioi-tiny was trained on ``corpus.py``): IOI sentences in
which the repeated name is the only reliable sign of the subject (no "last name before the end", no "name after a
clause marker" shortcut), plus non-IOI text (narratives, copying/induction sequences, roll calls, a factual-recall
table). ``python -m interplab.zoo.train_ioi_tiny`` trains on it by default (the curriculum, embedding-init and
weight-average defaults of this corpus are in ``train_ioi_tiny.CORPUS_DEFAULTS``); ``interplab.zoo.ioi_dataset`` is
this module's.

Why training on it used to stall, and what fixed that: the names are exchangeable (no name has statistics of its
own), so early training only learns "a name comes next" and pulls all 81 name embeddings (tied with the unembedding)
towards one shared direction, while their distinguishing parts stay at GPT-2's init scale (std 0.02). After
LayerNorm the names are then nearly alike, and copying *one* of them to the end carries almost no signal: the model
sat on the plateau that predicts a name uniformly (answer loss log 81 = 4.39) for 500+ steps, with or without a
curriculum or more copying text. With the token embeddings drawn at std 0.1 (``--emb-std``) the plateau ends by
step ~200 (answer loss 4.02 at step 100, 2.85 at step 300; std 0.02: 4.42 at step 100, 4.44 at step 500).

Status. Measured on a lent GPU (``train_ioi_tiny --corpus repeated-name --device cuda``, ten
runs at a time, 2026-11-30; GPU weights differ from CPU ones, so these are recipe findings, not the shipped run):
- the second plateau (IO vs S at chance) was a matter of steps: at batch 48 every run reaches held-out ``test``
  accuracy 0.93-1.00 by step 2000-4000 (the earlier CPU runs were at batch 16 or stopped at step 500);
- the held-out phrasing families then failed mostly on top-1, not on IO vs S: the narratives taught "smiled at
  / waved to / said to" -> " the". Narratives now put names after those verbs, and the actions include ~20 more
  verbs ending in at/to/for/with: "When A and B arrived, S smiled at" went from top-1 0.00 to 0.95-1.00;
- still failing (3000 steps, ten variants of curriculum, seed, p_ioi, lr, batch): "A and B had a long talk. S said
  to" (top-1 0.00-0.55), "... came in. After a minute S waved to" (0.03-0.75), "A ran into B. Later that day S
  sent a obj to" (0.15-0.88), and mean logit diffs under 3 on several families; the duplicate-token signature
  (a head attending S2 -> S1 >= 0.3) appears in some 4000-step runs only (0.52-0.57), rarely at 3000 steps.
Then (same day, CPU): 25 more intros with the names in other slots, scene-first "when" clauses and more words
before S2. ``python -m interplab.zoo.train_ioi_tiny --corpus repeated-name --steps 3000 --threads 1 --out X``
(2215 s of training on the loaded 2-core machine), then ``evaluate_ioi_tiny --model X``: held-out ``test``
accuracy 0.985, logit diff +14.5; top-1 = IO 1.00 on six of the ten families (then_period, yesterday_period,
afterwards_talk, when_arrived, ran_into_later, came_in_minute, each with logit diff >= 6.7), but sitting_and 0.70
(logit diff 2.5), stayed_so 0.65 (accuracy 0.65: S and IO confused after "A stayed at the place with B, so"),
both_liked_but 0.68 (accuracy 1.00: the top-1 is another token after "gave it to") and bystander_asked 0.85. The
circuit goals: no head restores > 0.6 (max 0.26), a head in layer >= 1 restores 0.30 at the end, resid_pre at S2
carries 1.01 at layer >= 1; the duplicate-token signature is missing (best S2 -> S1 attention 0.07).
Then, with "it" objects added to the actions (``--steps 3000 --threads 2``, 4063 s on the loaded machine, niced):
held-out ``test`` accuracy 1.000, logit diff +14.5; **nine of the ten families meet the goal** (top-1 = IO 0.95-1.00,
logit diff 5.6-13.3); sitting_and does not (top-1 0.53, accuracy 0.68, logit diff 2.4: "A and B were sitting in the
place, and S passed the obj to"); circuit goals met (max single head 0.32, a layer >= 1 head 0.29 at the end, S2's
residual 1.02); duplicate-token signature still missing (best S2 -> S1 0.16, L1H2).
Then (2026-12-01, CPU, six runs of 3000-4000 steps, two at a time on the 2-core machine; held-out phrasings at 40
prompts each, the circuit figures from ``evaluate_ioi_tiny``):
- roll calls (``roll_call``: " again" after a name said before) gave the duplicate-token signature: a layer-1/2 head
  attends S2 -> S1 with 0.49-0.55 on average in five of six runs (0.12 in the other);
- progressive intros ("A and B were standing in the place") brought sitting_and to 0.92-1.00 in four of five runs;
  dropping the narrative "n gave it to m" (a name not in the story after "gave it to") brought both_liked_but to
  0.92-0.97;
- the circuit goals hold in every run (max single head 0.24-0.38, a layer >= 1 head 0.24-0.37 at the end, S2's
  residual 1.02-1.09); held-out ``test`` accuracy 0.955-1.000;
- the families still swing from one checkpoint to the next; an average of the weights (``--ema 0.995``) steadies
  them. The defaults of ``--corpus repeated-name`` (4000 steps, one thread, EMA; 1383 s of training beside another
  run), before the two narratives below, gave: IO > S on every family >= 0.95 (1.00 on eight), top-1 = IO >= 0.95
  on seven of ten; yesterday_period 0.70 (the rest " the": "... went to the restaurant. Daniel gave a book to"
  copies "to the" from the intro), ran_into_later 0.925 (logit diff 3.4), stayed_so 0.90;
- two narratives in which a verb ending in "to" asks for a name of the story after an earlier "to the <place>"
  ("n and m went to the p. There n gave the o to m."): at the defaults (1458 s of training, niced beside the test
  suite) **nine of the ten families meet the goal** (top-1 = IO 0.975-1.00, logit diff 3.9-13.0); stayed_so does
  not (top-1 0.85, accuracy 0.875: "A stayed at the place with B, so S bought a obj for"). Duplicate-token
  signature 0.49 (L2H0); circuit goals met (max single head 0.24, a layer-3 head 0.24 at the end, S2's residual
  1.07); held-out ``test`` accuracy 0.995, logit diff +12.6. Seven phrasings of our own, outside the repo, as a
  proxy for the hidden ones: top-1 0.47-1.00 (a ";" before S2 and "In the evening S read a story to" near 0.5).
  A second run at the defaults gave the same bytes (model.safetensors sha256 a97f2654..., 1531 s of training).
Shipped first (2026-12-01): that run, trained by the then defaults (seed 2, a pool of 60000 documents). Its
"duplicate-token signature" is a position: split by name order, L2H0 attends S2 -> S1 0.75 when S1 is the intro's
second name and 0.11 when it is the first (it looks at the second slot); no head attends S2 -> S1 >= 0.3 in both
orders (best 0.20, L1H3), so the roll calls did not teach the duplicate-token head they were meant to (the earlier
runs' 0.49-0.55 were not checked this way).
Two more draws with five "A <verb>ed at the place with B" intros, ";" joiners and "in the evening" openers (seeds 2
and 3, otherwise the defaults) fixed stayed_so (0.975, 1.00) but lost other families (7/10 and 8/10).
Seeds 3 and 4 at those defaults (two runs side by side on the idle 2-core machine, 1237 s and 1200 s of training):
seed 3 meets top-1 = IO >= 0.95 on all ten families but its logit diff is under 3 on ran_into_later (1.18) and
both_liked_but (1.76); seed 4 fails sitting_and only (top-1 0.80); circuit goals met in both; no head attends
S2 -> S1 >= 0.3 in both name orders in either (0.13, 0.03). So the recipe missed one or two families per seed, a
different one each time.
A larger pool (``--pool 300000``: each training document is drawn under twice in 4000 steps instead of about eight
times; two runs side by side, 1533 s and 1529 s of training): seed 2 meets **all ten families** (top-1 = IO
0.975-1.00, logit diff 3.07-15.9, ran_into_later the lowest), held-out ``test`` accuracy 1.000, logit diff +15.1,
top-1 0.970 (0.845 with 60000), and every circuit goal (max single head 0.39, a layer-1/2 head 0.38 at the end,
S2's residual 1.03); seed 3 fails sitting_and (0.85) and stayed_so (0.90), and its best late head at the end
restores 0.198 (goal 0.2). Neither has a duplicate-token head in both name orders (L1H1 attends S2 -> S1 0.89 in
ABBA, 0.01 in BABA). Seven phrasings of our own, outside the repo: five at top-1 0.97-1.00, "On Friday A and B
cooked dinner together. Afterwards S handed a obj to" 0.50 and "... In the evening S read a story to" 0.30 (IO > S
in 0.95 and 0.98 of them: the top-1 there is another token).
Shipped (2026-12-01, second): the seed-2 run with the larger pool, which the defaults now train (a second run at the
defaults gave the same bytes).
Then (2026-12-01, later; ``--threads 2``, one run at a time on the 2-core machine, 954-1019 s of training for 4000
steps; one thread takes about 25 minutes alone, the issue's limit): a second set of fourteen phrasings
(``evaluate_ioi_tiny.LATER_FAMILIES``, written for this and kept out of the corpus) shows how far the shipped model
carries: it meets top-1 = IO >= 0.95 and logit diff >= 3 on seven of them; five are at 0.00-0.60 ("Last week A and
B visited a friend. S brought a obj to" 0.00, "After the game, A and B went home. S said goodbye to" 0.275; the
top-1 is mostly a name not in the prompt, IO > S in 0.60-1.00). Candidate changes, each measured on both sets (40
prompts a family):
- bystanders named before the candidates (openers "{X} said that", "{X} saw that", "According to {X},", "{X} told
  us that", "{X} and {Y} heard that", "{X} was there.", "{X} left early, and"; five bystanders drawn instead of
  three) and, before a quarter of the prompts, a nameless scene sentence (PREAMBLES: "It was a cold day.", "It was
  a long week.", "The {place2} was quiet.", "Nobody was home.", "The weather was nice.", "It was snowing
  outside.", "The {place2} was full of people.", "Everyone was busy that day.", "It was the first day of
  spring.", "The town was small."): seed 2 meets 12 of the 14 later phrasings (lowest semicolon 0.75) but misses
  sitting_and and ran_into_later (0.85) and both_liked_but's logit diff (1.8); seed 3 misses sitting_and only
  (0.85, logit diff 1.9), later 9 of 14 (semicolon 0.30); seed 4 was stopped at step 3250 with sitting_and 0.75;
  5000 steps with ``--ema 0.998`` (seed 2): ran_into_later 0.90, stayed_so 0.925, later 9 of 14;
- those plus 88 intros composed from verb lists ("A and B went fishing", "A thanked B"): ran_into_later 0.35 (S
  and IO confused), stayed_so 0.925, later 8 of 14;
- the first change without the "{X} left early, and" opener (seed 2; a ", and" before the candidates was a guess at
  sitting_and's trouble): 7 of 10 (sitting_and 0.60, yesterday_period 0.90 and logit diff 1.2, bystander_asked
  0.875), later 8 of 14. So sitting_and is not that opener's doing.
- the shipped recipe itself at two threads (seed 2, 956 s of training): 6 of 10 (then_period 0.90, ran_into_later
  0.90, stayed_so 0.925, both_liked_but logit diff 2.1), later 8 of 14: the shipped one-thread run is a lucky draw.
Then (2026-12-01, eleventh session; the same settings, one run at a time, 1002-1065 s of training):
- the shipped recipe at two threads, seed 5: 6 of 10 (stayed_so 0.775, yesterday_period 0.85, ran_into_later
  0.90 and logit diff 1.8, came_in_minute 0.925), later 6 of 14, no duplicate-token head (best S2 -> S1 0.05);
- the bystander-opener corpus, seeds 6 and 7: 7 of 10 each (seed 6: stayed_so 0.725, sitting_and 0.90; seed 7:
  stayed_so 0.875, ran_into_later 0.90, afterwards_talk 0.925), later 5 and 8 of 14;
- that corpus plus **stray words**: in 30% of the training prompts, a sentence of 3-6 everyday words that no
  template or held-out phrasing uses ("Lamp car often trip danced.") before the prompt, or one or two of them put
  between the words before S2 (157 words: nouns, past-tense verbs, adjectives, adverbs, four weekdays, five
  months; the evaluation prompts never get them). A word the model has not seen must not pull the name movers
  away: three of the shipped model's five lowest later phrasings hold a token that never occurs in its training
  text (" Friday" -> " F" "ri" "day", " inside" -> " in" "sid" "e", " game" -> " g" "am" "e"; so does
  on_sunday, 0.90). Seeds 2, 3, 4, 5 meet 8, 8, 7 and 6 of 10 (seed 2: stayed_so 0.60, sitting_and 0.90; seed 3:
  sitting_and 0.875, both_liked_but logit diff 2.4; seed 4: yesterday_period 0.825, afterwards_talk 0.90,
  then_period 0.925; seed 5: ran_into_later 0.70, stayed_so 0.75, then_period 0.85, sitting_and 0.90) and 10, 11, 9
  and 9 of the 14 later phrasings; seed 2 has the first head that attends S2 -> S1 >= 0.3 in both name orders
  (0.31, L2H3; the others 0.02-0.26). The circuit goals held in every run.
So across ten two-thread draws of three recipes at 4000 steps (the runs above at the defaults' other settings) the
goal families met were 6-9 of 10, never all ten; the stray words lift the later set (9-11 of 14 against 5-12) but
not the goal set. The seed decides more than any corpus change tried. The misses are the same few families
(sitting_and, stayed_so, ran_into_later, both_liked_but's logit diff), and their top-1 is mostly a name that is not
in the prompt or S.
Then (2026-12-01, twelfth session):
- the time limit, measured: one thread alone trains at 0.37 s a step (``train_ioi_tiny --steps 500``: 187 s of
  training, 225 s in all with the tokenizer and the pools), so the shipped run's 4000 steps take about 25 minutes
  plus 37 s; nothing that keeps its bytes saves enough (of a 395 ms step, the forward and backward take 380 ms,
  mostly matrix products; a batch 2 ms; the evaluation every 250 steps 0.9 s);
- checkpoints: the held-out phrasings stand best before the schedule ends. In 13 of the 18 logged runs of 4000
  steps above, more families met the goal (20 prompts, the training log) at some step between 2000 and 3250 than
  at step 4000. So six runs saved their weight average every 125 or 250 steps from step 1750 or 2000, each then
  measured at 40 prompts a family (``--stop-at``, new, stops a schedule early for such a recipe):
  - the stray-word corpus, seed 3, two threads (the run above, step for step): step 2500 meets all ten families
    (top-1 = IO 0.95-1.00, logit diff 3.4-15.4), 10 of the 14 later phrasings and the circuit goals (largest single
    head 0.42, a layer-1 head 0.42 at the end, S2's residual 1.02), but no head attends S2 -> S1 >= 0.3 (best 0.09);
    its other checkpoints meet 7-9;
  - the bystander corpus, seed 3, two threads: step 2000 meets all ten (later 7 of 14), best S2 -> S1 0.09; a
    duplicate-token head then grows (0.23 at step 2250, 0.32 at 2500, 0.44-0.49 from 3000; in both name orders
    0.28-0.35 from 2750) while sitting_and falls to 0.70-0.875: 8-9 of ten from step 2250 on;
  - the stray-word corpus, one thread, a 4000-step schedule stopped at 3600, seeds 4 and 5: seed 5 meets 8-9 of ten
    from step 1875 on with a duplicate-token head throughout (0.38-0.46; in both orders 0.30-0.33 from step 3125),
    ran_into_later (0.80-0.925) the miss at every step; seed 4 meets 9 at steps 2500, 3125-3250 and 3500-3600
    (when_arrived or ran_into_later the miss), its duplicate-token head positional (0.48; 0.03-0.11 in both
    orders);
  - the same, seeds 6 and 7 (stopped at step 2875 and 2750 for the session's time): at most 7 and 6 of ten
    (ran_into_later 0.575-0.75 and sitting_and 0.80-0.925 throughout), no duplicate-token head (0.03-0.08); they
    learn later than seeds 4 and 5.
  So no checkpoint of these runs meets every goal: the families and the duplicate-token head come and go at
  different steps.
- twelve more phrasings, kept out of training, to choose the checkpoint without looking at the goal set: they did
  not follow it (9-10 of 12 at every checkpoint of the first run; two of them low throughout), and would have
  chosen step 3500 (8 of 10) there, so they were not kept.
Then (2026-12-02, thirteenth session): the shipped run again (seed 2, one thread, alone on the machine), saving its
weight average from step 3000: it retraced the shipped run's log step for step, and step 3250 was reached after 1262
s of training (3750 after 1457 s; the first run reached 4000 after 1533 s). At 200 prompts a family (the card's
count since this session; at 40 a family's mean logit diff moved by about 0.5 between samples), step 3250 meets all
ten families (ran_into_later the lowest, logit diff 3.07; the step-4000 model meets 8: ran_into_later and stayed_so
at top-1 0.945), steps 3000, 3500 and 3750 meet 9, 8 and 9. **Shipped (2026-12-02, third): the first 3250 steps of
that schedule** (``stop_at=3250`` in the defaults; the same heads in the same roles as the step-4000 model). Its
margin is thin: on three other samples of 200 prompts (the card's "other samples" row) ran_into_later's logit diff
is 2.64-3.06, so that family sits at the goal's edge; its duplicate-token signature is still the positional L1H1. Of
the runs above, the two checkpoints that meet the families with a margin on other samples too (the stray-word
corpus, seed 3, two threads, step 2500: lowest top-1 0.99 and logit diff 4.1 at 100 prompts; the bystander corpus,
seed 3, two threads, step 2000: 0.98 and 4.1) have no head attending S2 -> S1 >= 0.1.
A try at teaching that head directly, not kept: odd-one-out lists ("Votes: Sophie, Sophie, Peter, Amber, Peter,
Kevin, Amber. Only once: Kevin.", the answer weighted like an IOI answer) as a fifth of the non-IOI documents (taken
from the roll calls' share; 3% of all), seed 2, one thread, 3250 steps of the 4000-step schedule: the model did not
learn the lists (top-1 0.19 on 100 of them; no head gives a repeated name's first mention more than 0.24 there), has
no S2 -> S1 head in IOI prompts (0.05) and meets 5-7 of the ten families at 100 prompts from step 2000 on.
Then (fourteenth session): the shipped model and the two checkpoints above predict " again" after a name repeated in
a roll call with top-1 0.98-0.99, yet no head attends from the repeat to its first mention above 0.32 (0.12 and
0.14 in the two checkpoints): with lists this short, "said before" is read from an average over the earlier names,
so the roll calls need no duplicate-token head. A task that an average cannot solve, not kept: seat lists ("Rooms:
8 George, 6 James, 5 Ryan, 7 Megan. So: Megan 7, Ryan 5."; at a repeated name its number is the token before the
first mention, so a head at the repeat must find that mention), seed 2, one thread, the shipped schedule. As a fifth
of the non-IOI documents (3% of all) with weight 1: lookups at chance (top-1 0.10 on 100 lists) at steps 1750 and
2250. As 35% of them (5% of all), the first lookup weighted like an IOI answer: at chance at every step to 3250,
which meets 9 of the ten families (sitting_and 0.77 at 200 prompts) and 12 of the 14 later ones, with the
positional head again (L2H0, S2 -> S1 0.61 ABBA, 0.07 BABA). As a quarter of all documents: at chance at step
2750, and IOI learned later (7 of ten families at 2750). Trained on seat lists alone (1000 steps of a 1000-step
schedule, no IOI), the weighted lookup's loss stays at ln 9 (2.19-2.21 at steps 250-1000): this 4-layer model, at
these settings, does not find the lookup within the budget, even alone.
Then (fifteenth session), why the seat lists failed: their digits collapse. Trained on seat lists alone (2000
steps, no head dropout) the model gives each of the nine digits 0.11 at a lookup, and their embeddings lie 0.3-0.5
apart where names lie 1.1-1.5 apart (norms about 1): the unembedding is tied, a token whose every occurrence is a
uniform guess is pulled toward the others, and then cannot be told apart when it is to be copied. With names as the
values instead ("Tables: Jane Eva, Amber Anna, Simon Helen. So: Anna Amber", 5% of all documents, the first lookup
weighted), not kept: still at chance at steps 2500 and 3000 (top-1 0.06 on 200 lists; no head gives the repeat's
first mention more than 0.16). Long roll calls (6-14 names, 8-16 items, the first " again" weighted like an IOI
answer), seed 2, one thread, the shipped schedule, not kept: a head attending S2 -> S1 in both name orders grows
while families are lost (100 prompts a family): step 2500 meets 9 of ten (stayed_so 0.91; L1H2 0.53 ABBA, 0.23
BABA), 2750 9 (0.50, 0.24), 3000 7 (L1H3 0.27, 0.34), 3250 7 (ran_into_later's logit diff 1.89; L1H3 0.29,
0.42); in the roll calls themselves " again" is still read from an average (a repeat's first mention gets at most
0.11 from any head).
The same corpus at two threads (about 0.3 s a step on this machine's two cores, against 0.45-0.5 for one thread
beside another run) with a longer schedule, 5500 steps, saving the weight average from step 3000: step 3000 meets
all ten families with a margin (200 prompts: lowest top-1 stayed_so 0.975, lowest logit diff came_in_minute 7.4;
on three other samples 0.965 and 7.3 at worst) and 13 of the 14 later phrasings (rain 0.91); steps 3250 and 3500
meet nine (stayed_so 0.92 and 0.94 at 100 prompts). Its duplicate-token signature is the positional kind again
(L1H2: 0.32 on average, 0.51 ABBA, 0.05 BABA). **Shipped (2026-12-02, fifteenth session): the first 3000 steps of
that schedule**, long roll calls in the corpus, two threads: one draw, like every run here (no other seed of
this recipe was tried; other seeds of earlier recipes lost families).
Then (sixteenth session), not kept: intros with a third name that is repeated before S2 ("Vera, Diana and Lisa went
to the garden. Then Diana left, and then Lisa ... argued with" -> Vera; ``INTROS_THREE``, the extra name in any of
the three slots, and ``MIDDLES_THREE``, which repeat it; ``train_ioi_tiny --third-name P`` puts them in a share P
of the training IOI prompts; evaluation prompts unchanged), so that the intro's slots no longer tell where S1 is
and only a match of names does. The shipped schedule otherwise (seed 2, 5500 steps, the weight average saved every
250 steps), 100 prompts a family:
- 25%, one thread: a head attending S2 -> S1 in both name orders forms early and stays (L1H3: 0.42 ABBA / 0.26
  BABA at step 2000, 0.27-0.32 / 0.28-0.30 from 2500 to 4000; 0.27-0.35 on average, under the goal's 0.3 from
  step 3250), the first run in which it forms before the phrasings peak; but the phrasings are learned later and
  weaker: 5-8 of ten families (step 3250: 8, ran_into_later's logit diff 2.4, came_in_minute's 2.9, every top-1
  >= 0.96), 5-7 of the 14 later phrasings;
- 40%, one thread: the positional kind again (L1H2 0.54-0.68 ABBA, 0.07-0.13 BABA); step 3250 meets all ten
  families (lowest logit diff 3.25), later 7 of 14;
- 12%, two threads: the positional head turns into a both-orders one late (L1H2 0.25/0.09 at step 2500, 0.36/0.23
  at 3000, 0.39/0.28 at 3500, 0.34 on average) while ran_into_later stays under the goal (logit diff 1.3-2.5; the
  nine other families met from step 2750);
- from here on without the middle ". Later, C went out" (a guess at ran_into_later's trouble; ``MIDDLES_THREE``
  as it is now): 12%, two threads: positional (L1H0 0.84 ABBA, 0.02 BABA), 8-9 of ten (sitting_and 0.84-0.90);
- 25%, two threads (``--third-name 0.25``, the defaults otherwise): 9 of ten at steps 2500-2750 (stayed_so or
  sitting_and at 0.94) while L1H3 is positional (0.49/0.13); from step 3000 that head attends S2 -> S1 in both
  orders (0.25/0.26 at 3000, 0.23/0.24 at 3250, 0.25/0.24 at 3500), and steps 3250 and 3500 meet all ten
  families. Step 3500 at the card's 200 prompts (``evaluate_ioi_tiny --model``): all ten families (lowest top-1
  sitting_and 0.97, lowest logit diff both_liked_but 4.0), all ten on three other samples (0.965 and 3.86 at
  worst), 10 of the 14 later phrasings, the circuit goals (largest single head 0.24, a layer-1 head 0.26 at the
  end, S2's residual 1.04 at layer 1), test split top-1 0.91 (the shipped model 0.975). But L1H3 is not a
  duplicate-token head: from S2 it attends to IO as much as to S1 (S2 -> IO 0.33, S2 -> S1 0.26), an average over
  the earlier names; so "high in both name orders" alone does not tell a duplicate-token head from one that
  attends to every earlier name (S2 -> S1 must also stand above S2 -> IO).
So a third name makes a head that looks back from S2 in both name orders likelier (three runs of five, against
about four of the twenty runs before), but in the one run that met every family with it, it is an average over the
names, and no head attends S2 -> S1 >= 0.3.
Then (seventeenth session), the both-orders heads above measured against S2 -> IO (100 prompts): every one
averages over the earlier names. Run a's L1H3 gives IO 0.39-0.48 against S1 0.26-0.42 (steps 2000-4000), run c's
L1H2 IO 0.32-0.36 against S1 0.23-0.39, run e's L1H3 IO 0.33-0.37 against S1 0.23-0.35. The card's check now asks
for S2 -> S1 above S2 -> IO as well (``model_card.duplicate_token_head``). Three more runs at 25% third names, two
threads, 100 prompts a family:
- run e on to step 4500 (the 5500-step schedule): a second head, L2H3, turns to the earlier copy of the name from
  step 3750: S2 -> S1 0.12/0.18 (ABBA/BABA) at 3750, 0.21/0.34 at 4000, 0.21/0.44 at 4500, with S2 -> IO 0.04-0.09;
  the first head of any run here that looks at S1 far more than at IO in both orders, and 0.31 on average at 4500
  (the issue's figure); but ABBA stays at 0.21, and sitting_and falls under the goal as it forms (top-1 0.90-0.94:
  nine of ten families at every step from 3750 to 4500);
- a 4500-step schedule, seed 2: L2H3 that way from step 3000 (0.34-0.43 ABBA, 0.19-0.24 BABA, S2 -> IO 0.15-0.20,
  0.28-0.33 on average), while sitting_and stays at top-1 0.74-0.81 (its misses are mostly names that are not in
  the prompt at all; nine of ten families from step 3250);
- the same, seed 3: learns the families sooner (held-out accuracy 0.85 at step 1500, against 0.54) but meets 7-9 of
  ten from step 3000 (yesterday_period 0.76-0.94 throughout); L1H3 looks at S1 0.61-0.68 in ABBA and 0.11-0.30 in
  BABA (S2 -> IO 0.21-0.26), L1H1 averages (0.31-0.49 / 0.22-0.36, IO 0.30-0.35).
At two threads the 4500 steps took 1439 and 1490 s of training, 24:51 and 25:43 from launch to saved weights (with
snapshots saved and measured beside them): at the issue's 25-minute edge, so a shipped recipe would stop by 4250.
A probe, not kept: groups of two with a lookup ("Today, Amber and Peter went to the farm, and Sophie and Kate went
to the library. Then Peter gave a pencil to" -> Amber: S1's partner, so that neither an average over the earlier
names nor an intro slot gives the answer, only the earlier copy of S does), as the whole corpus, 1500 steps of a
1500-step schedule, seed 2: top-1 0.31 at the end (about chance among the other names), and a head that looks from
S2 at S1 (L1H1, 0.20, S2 -> the answer 0.00) only at the last snapshot: slow to learn even alone.
So with a third name in a quarter of the prompts, a head that looks at the earlier copy of the name (both orders,
S1 above IO) forms in two of three runs, after 3000-3750 steps; in each, one phrasing family drops under the goal
as it forms, and no checkpoint meets both. Next: a run that starts from the third-name recipe's step 3000 with a
lower third-name share (the families held best at 12-25%), or the sitting_and misses (names absent from the prompt)
looked at first.
Then (eighteenth session), two findings that change how the runs above read:
- the trained bytes depend on the CPU: MKL and torch's own kernels take other code paths (so other float sums) on
  AVX-512 than on AVX2, and on this session's machine (AVX-512 with AMX) the shipped recipe gives model.safetensors
  b7028d0e..., not the shipped f533b816...; that draw meets 9 of the ten families (afterwards_talk top-1 0.91 at
  100 prompts) and 9 of the 14 later phrasings, so the shipped model was one lucky draw of its recipe on its CPU,
  and the runs of earlier sessions were draws on whatever CPU each had (a seed-2 third-name run here is not
  session 17's run e). ``MKL_CBWR=AVX2`` alone and ``ATEN_CPU_CAPABILITY=avx2`` alone each change a 60-step run's
  bytes (``ONEDNN_MAX_CPU_ISA`` does not); ``train_ioi_tiny --cpu-isa avx2`` (new) sets both before the first
  torch op (the same bytes as setting them outside), for the same weights on any x86-64 CPU with AVX2, and
  training_info.json now records the library versions and the kernels' instruction set;
- on the idle machine a two-thread step takes 0.21-0.24 s (0.3 s and more beside other work, as most earlier
  timings were), so a full 5500-step schedule fits the issue's 25 minutes (1258 s of training).
Runs at ``--third-name 0.25``, the weight average saved every 250 steps (``--save-every``, new), 100 prompts a
family, the look-back heads measured on 100 ``test`` prompts split by name order (S2 -> S1 / S2 -> IO, ABBA then
BABA; ``attention_summary`` now splits S2 -> IO too):
- seed 2, the full 5500-step schedule: all ten families at every snapshot from step 3750 to 5500 (eight in a row;
  no recipe above held them so steadily), 11-13 of the 14 later phrasings; L1H3 looks at the intro's second slot
  and spreads over both names (S1 0.40-0.50 / 0.25-0.34, IO 0.30-0.35 / 0.47-0.59): no duplicate-token head;
- seed 4, a 4250-step schedule: all ten at steps 3000 and 3250, nine after (stayed_so 0.94, then both_liked_but
  0.91-0.92); no head looks from S2 at S1 (at most 0.14);
- seed 2 with ``--cpu-isa avx2``, the 5500-step schedule: all ten at step 3250 and at every snapshot from 3750 to
  5500 (nine at 3000 and 3500), 9-12 of the 14 later; L1H3 the slot-2 kind again (S1 0.39-0.56 / 0.14-0.26, IO
  0.12-0.29 / 0.43-0.64), and L1H1 grows into one that looks at the copy in ABBA but at both names alike in BABA
  (0.41 / 0.17 and 0.30 / 0.30 at step 5500).
Why a duplicate-token head does not form here, as far as these runs show: the answer is the intro name that is not
S2's token, and the end can push S2's token down directly (the card: the S2 signal is read at S2 itself in layer 0,
L0H0 and MLP0, and moved to the end); S1's *position* is never needed, so nothing in the loss pays a head for
finding it. A look-back head pays only where information stands at the earlier copy (lookups), and no lookup task
above was learned within the budget (seat lists, name tables, pair lookups). Every head since that looks from S2
at S1 has been the slot kind or an average over the names.
Then (nineteenth session, on the eighteenth's machine), whether a pinned run can replace the shipped model:
- the shipped recipe with ``--cpu-isa avx2`` gives model.safetensors 2b83db1d..., not f533b816... either: the
  shipped bytes came from a machine whose kernels neither this CPU's native paths nor its AVX2 ones repeat (the
  project's machines include aarch64 ones, which no x86 pin matches); measured like the card (200 prompts a
  family), that draw misses one family (ran_into_later: top-1 0.995 but logit diff 2.46), and the native draw
  b7028d0e... two (afterwards_talk top-1 0.93, ran_into_later 0.905);
- pinning costs time, mostly MKL's: 300 steps (``--pool 5000``) took 118 s of training native, 150 s with
  ``MKL_CBWR=AVX2`` alone, 126 s with ``ATEN_CPU_CAPABILITY=avx2`` alone, 158 s with both; the shipped recipe
  1034 s pinned against 633 s native (1.6 times). So the eighteenth session's "as fast as native" was wrong, a
  pinned full 5500-step schedule is past the 25 minutes (1849 s of training for seed 2), and a pinned recipe must
  stop by about step 3750;
- the best pinned run, seed 2 at ``--third-name 0.25`` (above), measured like the card (200 prompts a family, 100
  a later family): step 3750 meets all ten (lowest top-1 then_period 0.99), 10 of the 14 later phrasings, test
  split top-1 0.925; step 4000 all ten (stayed_so 0.97), 11 of 14, test 0.90; the shipped model all ten (0.975),
  13 of 14, test 0.975. Seed 3 the same way: 6-8 of ten at every snapshot from 3000 to 4250, 7-8 of the later 14.
  Seed 5, stopped at step 3750 (19:54 from launch to saved weights): nine of ten at every snapshot from 3000
  (sitting_and 0.70-0.92), 8-10 of the later 14. Seed 6 the same way (trained beside a CI run, so its time says
  nothing): the best on the later phrasings of any run, 12 of 14 at every snapshot (mean top-1 0.97-0.99; 0.994
  at step 3750, where the shipped model has 0.991), but sitting_and stays at top-1 0.71-0.80: nine of ten.
So no pinned draw yet is as good as the shipped one, which stays: reproducible bit for bit from the defaults only
on a machine like the one that trained it.
Then (twentieth session), whether the pin holds on other CPUs, checked under QEMU's user-mode emulation of an Intel
Haswell (AVX2, no AVX-512) and an AMD EPYC-Rome (``scripts/pinned_weights.sh``, new; emulated float arithmetic is
exact but about 4000 times slower, so the check trains the recipe's model at batch 2 for a few steps):
- the eighteenth session's pin held on the emulated Intel but not on the AMD CPU, for two reasons: MKL's AVX2 mode
  is not its strict one (a 32-row product differed; ``MKL_CBWR=AVX2,STRICT`` makes this Xeon's products equal the
  AMD ones), and the unfused AdamW takes its square root from MKL's vector math, which takes another path on AMD
  CPUs: emulated, 10146 of 49152 square roots differ from numpy's exact ones, where this Xeon's are all exact
  (``torch.exp`` and ``torch.log`` differ there too; this training does not call them);
- oneDNN also picks its kernels by the CPU (the exact GELU differs between AVX-512 and AVX2 unless
  ``ONEDNN_MAX_CPU_ISA=AVX2``); this training does not reach it today;
- so ``--cpu-isa avx2`` now sets ``PINNED_KERNELS`` (MKL's strict AVX2 mode, torch's and oneDNN's AVX2 kernels) and
  trains with the fused AdamW (torch's own kernel, exact square root); native runs keep the unfused optimizer, so
  the shipped recipe's bytes are as before. With both, the weights are the same here and on both emulated CPUs
  (four steps). The pinned runs of the eighteenth and nineteenth sessions used the old pin, so a pinned search
  starts again from here. On the idle machine 300 steps (``--pool 5000 --eval-every 0``) took 85 s of training
  native, 107 s with the old pin and 104 s with the new one: the strict mode and the fused AdamW cost nothing.
Then (twenty-first session, on a real AMD EPYC: Zen, AVX2 only, two cores), the pin and the shipped bytes on an
AMD CPU:
- the pin holds: the 2- and 4-step runs of ``scripts/pinned_weights.sh`` (batch 2) give here the bytes the Xeon
  and both emulated CPUs gave (70587543... and a7eea8e0...);
- the shipped recipe, unpinned (``train_ioi_tiny --eval-every 0``, the defaults otherwise), gives the shipped
  f533b816... here: the fifteenth session's machine was an AMD EPYC like this one, and the shipped weights repeat
  from the defaults on such machines (19:55 as a whole process, 1141 s of training, against 854 s there). Intel
  CPUs cannot repeat them: here MKL's vector square root (which the unfused AdamW of an unpinned run calls) rounds
  163159 of 1048576 values otherwise than the exact one, with or without ``MKL_CBWR``, where the Xeon's are exact;
- pinning costs nothing here (no AVX-512 to give up): 3000 steps pinned took 1096 s of training (evaluated every
  500 steps), unpinned 1141 s;
- new pinned draws (``--cpu-isa avx2 --save-every 250``, the weight average; 200 prompts a family, 100 a later
  phrasing, test-split top-1 on 200):
  - ``--third-name 0.25``, seed 2, stopped at 3750 (26:35 as a whole process: past the 25 minutes here): 8-10 of
    ten families at the snapshots 2750-3750 (10 only at 3000), 6-8 of the 14 later phrasings (last_week 0.00-0.05),
    test top-1 0.875-0.915;
  - the shipped recipe pinned (seed 2), stopped at 3500: 8, 9, 10, 10 and 8 of ten at 2500-3500; step 3000 (what
    ``--cpu-isa avx2`` with the defaults gives) meets all ten but at the edge (ran_into_later top-1 0.95, logit
    diff 3.2) and 8 of the 14 later (rain 0.61), test top-1 0.97, against the shipped model's 13 of 14 and 0.975;
  - the same, seed 3 (trained niced beside a CI run, so its time says nothing): 8, 6, 8, 8 and 7 of ten at
    2500-3500 (sitting_and or stayed_so at 0.87-0.94), 8-10 of the 14 later, test top-1 0.95-0.98;
  - the same, seed 4, stopped at 3250 (22:08 as a whole process, 1283 s of training, not evaluated on the
    way): 8, 8, 9 and 8 of ten at 2500-3250 (sitting_and 0.53-0.79), 7-8 of the 14 later, test 0.915-0.955.
So the shipped model stays: reproducible from the defaults on AMD EPYC machines like the two that trained it.
Then (twenty-second session, the same AMD EPYC), two more pinned draws of the shipped recipe, each saving weight
averages of other decays beside its snapshots (``--also-ema``, new: they do not change the training, and ``--ema``
gives their bytes), and one corpus change; 200 prompts a family, 100 a later phrasing, test top-1 on 200:
- seed 5 (stopped at 3260): all ten families with a wide margin at 2750-3250 (decay 0.995: lowest top-1 0.95-0.985,
  lowest logit diff 7.2-8.8; test top-1 0.99-1.00), but 10 of the 14 later phrasings wherever measured (rain
  0.22-0.61, after_game 0.55-0.68: the top-1 there is a name not in the prompt), and no look-back head (best
  S2 -> S1 0.05 at 2750, 0.31 at 3250 from L2H2, which gives IO as much); decays 0.998 and 0.999 lose families
  early (7-9 of ten at 2500), 0.997 is as good as 0.995;
- seed 6: decay 0.997 meets all ten at 2500, 2750 and 3000 (0.995: 9, 10, 9), and at 2750 12-13 of the 14 later
  phrasings (rain 0.94), test top-1 0.985 and the issue's look-back figure (L2H0 0.42, the slot kind): as good as
  the shipped model on every proxy but one, yesterday_period, which sits at the goal's edge (top-1 0.950, 0.950,
  0.945 and 0.950 on four samples of 200; the shipped model's lowest family 0.965-0.975). Not shipped for that;
- nonsense words (2-9 random letters, some capitalised) put between the words of 30% of the training IOI prompts,
  the tokenizer trained on that text too (so 3000 tokens, 1.19M parameters), seed 2, pinned, meant to teach the
  model to pass over tokens it has not learned (the later phrasings' worst prompts hold words this corpus never
  has, split into fragments such as " in" "sid" "e"): step 2500 meets all ten families but test top-1 falls to 0.64
  (" the" or " a" after the held-out templates' actions) and 9 of the 14 later phrasings; stopped there, not kept.

Pure Python (no torch). The names, the name-pair split, the facts, the splits of ``ioi_dataset`` and the
helpers that build a document are ``corpus.py``'s, imported from there, so the two corpora share them.

Splits: the four of ``corpus.py`` (name pairs split by the same stable hash). Templates here are built from more
parts (opener or subordinator, intro, middle, joiner, words before S2, stretch after S2, action); a template is
*held out* when its intro, stretch after S2 or action comes from a held-out list. Training IOI text only uses
training pairs with training templates.

Evaluation prompts mention the subject exactly twice (S1 in the intro, S2 later) and the IO once, so the corrupt
prompt (S2 replaced by the IO name) has the opposite answer. Training text may mention the subject a third time
(never the IO twice). Phrasing families that this generator never produces are in
``evaluate_ioi_tiny.HELDOUT_FAMILIES``.

``simple=True`` (``ioi_example``, ``training_document``) leaves out the optional parts (opener, middle, words
before S2, stretch after S2): the two candidates then stand at the start of the document, at nearly fixed
positions. The training script starts on such documents (a curriculum), where copying a candidate name to the end
is learned quickly, and then moves to the full distribution, where only the repeated name tells S from IO.
"""

from __future__ import annotations

import random

from interplab.zoo import corpus
from interplab.zoo.corpus import (  # noqa: F401  (EOS, FACTS, FILLER, fact, _pair_is_test, _sample_pair: interface)
    EOS,
    FACTS,
    FILLER,
    NAMES,
    _pair_is_test,
    _sample_pair,
    fact,
)

# names, facts and filler words are corpus.py's; places and objects vary more
PLACES = """store park school office hospital station restaurant garden library beach market kitchen museum church
house lake bank theater hotel farm cafe shop airport zoo""".split()

OBJECTS = """drink book ring bone basketball kiss snack letter apple pencil bottle cake flower computer necklace
ticket key bag hat candle gift box cup phone coin map pen card toy ball cookie""".split()

# ---------------------------------------------------------------- IOI sentences, built from parts
# An IOI sentence names two candidates A and B in an intro (both orders, several constructions), may add a middle
# with bystanders, and ends with a clause in which the subject S (one of the candidates) is mentioned again (S2)
# and acts on the other candidate, the indirect object IO (the answer). The parts vary so that *only the repetition
# of a name* tells which candidate is S:
# - S2 stands in every slot: at a sentence start after a period, after "and", after a comma, after an opening
#   adverb ("Later,", "At the store"), mid-clause after another name ("Kate asked John to give ... to");
# - clause markers and sentence starts come before other names too (openers before the intro's first name, middles
#   such as ". Then Kate came in"), so "the name after a marker" is no longer S2;
# - bystanders may stand before S2 (middle, "Kate asked S2") and after it ("S2, who had seen Kate earlier,"), so
#   S2 is neither the last name nor the last name after a marker; in training text S may be mentioned a third
#   time, the IO never twice: the IO is the candidate that is *not* repeated;
# - verbs end in "to", "at", "with", "for" or "from", with varied objects and places.
# Evaluation phrasings that the generator never produces live in evaluate_ioi_tiny.HELDOUT_FAMILIES.
OPENERS = ["", "", "", "", "Later,", "Today", "One day,", "On Monday", "Last night", "In the morning,",
           "After lunch,", "Soon", "At noon", "This morning", "Earlier,", "Next,", "That evening", "Later that week,"]
SUBORDINATORS = ["When", "After", "While", "As soon as", "Because", "Since", "Just after",
                 # a scene first, the names inside a "when" clause
                 "The {place2} was empty when", "It was late when", "It was raining when", "The sun was low when",
                 "Everyone was asleep when", "The {place2} was busy when"]
INTROS_TRAIN = [
    "{A} and {B} went to the {place}", "{A} and {B} were at the {place}", "{A} and {B} met at the {place}",
    "{A} met {B} at the {place}", "{A} and {B} got a {obj} at the {place}", "{A} saw {B} at the {place}",
    "{A} and {B} had lunch", "{A} and {B} walked to the {place}", "{A} and {B} talked about the {obj}",
    "{A} went to the {place} with {B}", "{A} and {B} cleaned the {place}", "{A} and {B} stopped by the {place}",
    "{A} called {B}", "{A} and {B} came home", "{A} and {B} worked at the {place}",
    "{A} and {B} arrived at the {place}", "{A} and {B} entered the {place}", "{A} and {B} had fun at the {place}",
    "{A} and {B} were bored", "{A} joined {B} at the {place}", "{A} and {B} played in the {place}",
    "{A} helped {B} at the {place}", "{A} and {B} found a {obj}", "{A} and {B} sat in the {place}",
    "{A} and {B} were working at the {place}", "{A} and {B} woke up early", "{A} and {B} ate at the {place}",
    # the names in other slots and sentence shapes: object of a verb, after "with", "into", "for", both subjects of
    # "both", a compound subject after a scene
    "{A} bumped into {B} at the {place}", "{A} had a long chat with {B}", "{A} and {B} had a long chat",
    "{A} was talking with {B}", "{A} waited for {B} at the {place}", "{A} sat next to {B}",
    "{A} and {B} shared a {obj}", "{A} and {B} walked in", "{A} and {B} got home late", "{A} and {B} sat together",
    "{A} took a walk with {B}", "{A} went shopping with {B}", "{A} and {B} were resting in the {place}",
    "{A} and {B} looked at the {obj}", "{A} and {B} both wanted the {obj}", "{A} stayed home with {B}",
    "{A} ran after {B}", "{A} found {B} at the {place}", "{A} and {B} argued about the {obj}",
    "{A} and {B} waited outside the {place}", "{A} visited {B}", "{A} and {B} spent the day at the {place}",
    "{A} and {B} started to talk", "{A} phoned {B} from the {place}", "{A} and {B} were late for dinner",
    # progressive intros ("were <verb>ing in the place") before every joiner
    "{A} and {B} were standing in the {place}", "{A} and {B} were waiting at the {place}",
    "{A} and {B} were playing in the {place}", "{A} and {B} were eating at the {place}",
    "{A} and {B} were reading in the {place}", "{A} was waiting with {B} at the {place}",
]
INTROS_TEST = ["{A} and {B} visited the {place}", "{A} and {B} left the {place}", "{A} and {B} reached the {place}"]

# Middles after a main-clause intro: {X}, {Y} are bystanders in evaluation prompts; in training text also S.
MIDDLES = [
    "", "", "", "", ". It was late", ". It was a sunny day", ". {X} was tired", ". {X} talked to {Y} for a while",
    ". The {obj} was on the table", ". Then {X} came in", ". Later, {X} left", ", and {X} was happy",
    ", so {X} laughed", ". {X} and {Y} were there too", ". After a while {X} went home", ", then {X} sat down",
]
# Middles inside a subordinate intro ("When A and B went to the store with Kate, ...").
SUB_MIDDLES = ["", "", "", " with {X}", " and {X} was there too", ", and {X} saw them"]
# Joiners from a main-clause intro to the S2 clause (then a space); "." starts a new sentence.
JOINERS = [".", ".", ".", ", and", " and", ",", ", so", ", then", ". Then", ". Later,", ", but", ". After that,",
           ", and then", ". Afterwards"]
# Words in front of S2 inside its clause; "{X} asked" / "{X} told" take the infinitive of the action.
PRES = ["", "", "", "", "", "later", "at the {place2}", "after a while", "the next day", "in the end", "soon",
        "at last", "{X} asked", "{X} told", "{X} saw", "that night", "without a word", "after a moment",
        "a minute later", "later that night", "the next morning", "after some time", "then", "suddenly",
        "before dinner", "on the way home"]
POSTS_TRAIN = [
    "", "", "", "", " quickly", ", feeling generous,", " and {Y}", "'s friend {Y}", ", who had seen {Y} earlier,",
    " waved at {Y} and", ", after talking to {Y},", " was tired, so he", " nodded at {Y} and",
]
POSTS_TEST = [", who had talked to {Y} before,", " happily", " looked at {Y} and then"]
# (past tense, infinitive)
ACTIONS_TRAIN = [
    ("gave a {obj2} to", "give a {obj2} to"), ("handed the {obj2} to", "hand the {obj2} to"),
    ("passed the {obj2} to", "pass the {obj2} to"), ("threw the {obj2} to", "throw the {obj2} to"),
    ("sent a {obj2} to", "send a {obj2} to"), ("showed the {obj2} to", "show the {obj2} to"),
    ("offered a {obj2} to", "offer a {obj2} to"), ("sold a {obj2} to", "sell a {obj2} to"),
    ("returned the {obj2} to", "return the {obj2} to"), ("gave the {obj2} back to", "give the {obj2} back to"),
    ("said goodbye to", "say goodbye to"), ("said hello to", "say hello to"), ("talked to", "talk to"),
    ("spoke to", "speak to"), ("wrote a letter to", "write a letter to"), ("read a story to", "read a story to"),
    ("sang a song to", "sing a song to"), ("waved at", "wave at"), ("laughed at", "laugh at"),
    ("shouted at", "shout at"), ("winked at", "wink at"), ("pointed at", "point at"),
    ("played with", "play with"), ("danced with", "dance with"), ("argued with", "argue with"),
    ("bought a {obj2} for", "buy a {obj2} for"), ("made a {obj2} for", "make a {obj2} for"),
    ("cooked dinner for", "cook dinner for"), ("waited for", "wait for"), ("got a {obj2} from", "get a {obj2} from"),
    ("took the {obj2} from", "take the {obj2} from"), ("listened to", "listen to"), ("whispered to", "whisper to"),
    ("explained the plan to", "explain the plan to"), ("tossed the {obj2} to", "toss the {obj2} to"),
    # verbs that end a sentence in a preposition before a name, so that any "<verb> at/to/for/with" asks for a name
    ("smiled at", "smile at"), ("nodded to", "nod to"), ("waved to", "wave to"), ("said sorry to", "say sorry to"),
    ("yelled at", "yell at"), ("stared at", "stare at"), ("looked at", "look at"), ("turned to", "turn to"),
    ("walked over to", "walk over to"), ("ran to", "run to"), ("called out to", "call out to"),
    ("sat next to", "sit next to"), ("stood behind", "stand behind"), ("talked with", "talk with"),
    ("left a note for", "leave a note for"), ("kept a seat for", "keep a seat for"), ("paid for", "pay for"),
    ("baked a {obj2} for", "bake a {obj2} for"), ("borrowed a {obj2} from", "borrow a {obj2} from"),
    ("heard the news from", "hear the news from"), ("said thanks to", "say thanks to"),
    ("mailed a {obj2} to", "mail a {obj2} to"), ("carried the {obj2} to", "carry the {obj2} to"),
    # "it" as the object: the thing was named earlier ("A and B found a key, ... S handed it to")
    ("handed it to", "hand it to"), ("showed it to", "show it to"), ("sold it to", "sell it to"),
    ("passed it to", "pass it to"), ("threw it back to", "throw it back to"), ("left it for", "leave it for"),
]
# Intros with a third name that is repeated before S2 (an option of the training text, off by default; see the
# status): then the intro's slots no longer tell where S1 is, only a match of names does.
INTROS_THREE = [
    "{N1}, {N2} and {N3} went to the {place}", "{N1}, {N2} and {N3} met at the {place}",
    "{N1} and {N2} met {N3} at the {place}", "{N1} saw {N2} and {N3} at the {place}",
    "{N1}, {N2} and {N3} had lunch", "{N1} went to the {place} with {N2} and {N3}",
    "{N1} called {N2} and {N3}", "{N1}, {N2} and {N3} sat together",
    "{N1} and {N2} were at the {place} with {N3}", "{N1}, {N2} and {N3} were bored",
]
MIDDLES_THREE = [". {C} went home", ". Then {C} left", ", but {C} left early", ". {C} sat down",
                 ", and {C} was tired", ". {C} had to go", ", so {C} stayed behind"]
ACTIONS_TEST = [("brought a {obj2} to", "bring a {obj2} to"), ("lent the {obj2} to", "lend the {obj2} to")]


def _sample_template(rng: random.Random, held_out: bool) -> tuple[str, str, tuple[str, str]]:
    """(intro, post, action); held out = at least one of them from a test list."""
    return corpus._sample_parts(rng, held_out, [(INTROS_TRAIN, INTROS_TEST), (POSTS_TRAIN, POSTS_TEST),
                                                (ACTIONS_TRAIN, ACTIONS_TEST)])


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def ioi_example(rng: random.Random, *, test_pair: bool = False, test_template: bool = False,
                max_mentions: int = 3, simple: bool = False, third_name: float = 0.0) -> dict:
    """One IOI prompt: returns dict(prompt, corrupt, io, s); ``corrupt`` replaces S2 by the IO name.

    ``max_mentions=2`` (evaluation prompts): only bystanders in the middle, before and after S2, so S occurs twice
    and IO once. Otherwise (training text) those slots may also take S (never the IO), so S may occur three times.
    ``simple``: no opener, middle, words before S2 or stretch after S2 (the curriculum's first stage).
    ``third_name``: in training text, the share of prompts whose intro names a third person, repeated before S2
    ("A, C and B went to the park. Then C left, and B gave ... to" -> A).
    """
    a, b, io, s = corpus._candidates(rng, test_pair)
    intro, post, (past, inf) = _sample_template(rng, test_template)
    others = [n for n in NAMES if n not in (a, b)]
    bystanders = rng.sample(others, 3)
    queue = list(bystanders)

    def pick(may_be_s=False):
        if may_be_s and max_mentions > 2 and rng.random() < 0.3:
            return s
        return queue.pop() if queue else bystanders[0]

    # (no draw when the option is off, so the default text is the same as before it existed)
    third = max_mentions > 2 and not simple and third_name > 0 and rng.random() < third_name
    place, place2 = rng.sample(PLACES, 2)
    obj, obj2 = rng.sample(OBJECTS, 2)
    fill = dict(A=a, B=b, place=place, place2=place2, obj=obj, obj2=obj2)
    if third:
        c = rng.choice([n for n in others if n not in bystanders])
        names = [a, b]
        names.insert(rng.randrange(3), c)
        intro = rng.choice(INTROS_THREE).format(N1=names[0], N2=names[1], N3=names[2], place=place)
        head = intro + rng.choice(MIDDLES_THREE).format(C=c) + rng.choice(JOINERS)
        new_sentence = head.endswith(".")
    elif rng.random() < 0.35:  # subordinate intro: "When A and B ..., S2 ..."
        intro = intro.format(**fill)
        sub_middle = "" if simple else rng.choice(SUB_MIDDLES)
        head = f"{rng.choice(SUBORDINATORS)} {intro}{sub_middle},".format(X=pick(), place2=place2)
        new_sentence = False
    else:
        intro = intro.format(**fill)
        opener = "" if simple else rng.choice(OPENERS)
        middle = "" if simple else rng.choice(MIDDLES)
        head = (f"{opener} {intro}" if opener else intro) + middle.format(X=pick(True), Y=pick(), **fill)
        joiner = rng.choice(JOINERS)
        head += joiner
        new_sentence = joiner.endswith(".")
    if simple:
        post = ""
    pre = "" if simple else rng.choice(PRES)
    uses_inf = pre.startswith("{X}")
    if pre and rng.random() < 0.5 and not uses_inf and not new_sentence:
        pre += ","
    pre = pre.format(X=pick(), **fill)
    if pre and new_sentence:
        pre = _cap(pre)
    verb = ("to " + inf if pre.endswith(("asked", "told")) else inf) if uses_inf else past
    if uses_inf:
        post = ""  # "Kate asked John to give ..." keeps S2 next to its verb
    tail = (post + " " + verb).format(Y=pick(), **fill)
    lead = f"{head} {pre} " if pre else f"{head} "
    return {"prompt": f"{lead}{s}{tail}", "corrupt": f"{lead}{io}{tail}", "io": io, "s": s}


def ioi_dataset(n: int, split: str = "test", seed: int = 0) -> list[dict]:
    """``n`` IOI prompt pairs of this corpus for patching (splits and fields as corpus.ioi_dataset)."""
    return corpus.ioi_dataset(n, split, seed, example=ioi_example)


# ---------------------------------------------------------------- non-IOI text
# corpus.py's stories, then more (the same slots: {n}, {m} names, {p}, {q} places, {o} an object)
NARRATIVES = corpus.NARRATIVES + [
    # words of the evaluation's held-out phrasing families, outside IOI sentences
    "Then, {n} went to the {p}. It was quiet.",
    "Yesterday {n} had a long talk with the teacher at the {p}.",
    "Afterwards, {n} said that the {o} was new, and {m} said to {n} that it was old.",
    "When {n} arrived, the {p} was empty. {n} smiled at {m}.",
    "{n} was sitting in the {p}, and the {o} was on the table.",
    "At the {p}, {n} ran into an old friend. Later that day it rained.",
    "{n} stayed at the {p} with the dog.",
    "Both {n} and the cat liked the {o}, but in the end it was lost.",
    "After dinner {n} sat down in the {p}. The {o} was there.",
    "The {p} was quiet when {n} came in. After a minute {n} waved to {m}.",
    "{n} smiled at {m} and said to {m} that the {o} was in the {q}.",
    # ("gave it back", not "gave it to {m}": a name there that is not in the story taught "gave it to" ->
    # any name)
    "{n} gave it back, then sent a postcard and passed the salt.",
    # after "to the <place>" earlier, a verb ending in "to" still asks for a name of the story
    "{n} and {m} went to the {p}. There {n} gave the {o} to {m}.",
    "{n} walked to the {q} with {m}, and {m} sang a song to {n}.",
]


def narrative(rng: random.Random) -> str:
    """A short story about one or two people (one of ``NARRATIVES``, with this corpus's places and objects)."""
    return corpus._narrative(rng, NARRATIVES, PLACES, OBJECTS)


def induction(rng: random.Random) -> str:
    """A random word sequence repeated (copying / induction)."""
    return corpus._induction(rng, NAMES + OBJECTS + PLACES + FILLER)


def roll_call(rng: random.Random) -> str:
    """A list of names in which a name said before is followed by " again": predicting " again" needs the name's
    earlier mention, meant to teach a head at a repeated name to attend to its first mention (the duplicate-token
    signal that GPT-2 reads at S2; the shipped checkpoint did not learn one, see the module's status)."""
    names = rng.sample(NAMES, rng.randint(6, 14))  # long lists, so that an average over earlier names is a weak cue
    seen, items, last = set(), [], None
    for _ in range(rng.randint(8, 16)):
        earlier = sorted(seen - {last})  # never the name just said: that would need no look-back
        n = rng.choice(earlier) if earlier and rng.random() < 0.35 else rng.choice([x for x in names if x != last])
        items.append(f"{n} again" if n in seen else n)
        seen.add(n)
        last = n
    lead = rng.choice(["Roll call:", "At the door:", "In line:", "Who came:", "The list:", "Today:"])
    return f"{lead} {', '.join(items)}."


def _roll_call_document(rng: random.Random) -> tuple[str, str]:
    text = roll_call(rng)
    if " again" not in text:
        return text, ""
    head, tail = text.split(" again", 1)
    return head, " again" + tail  # the first " again" is weighted like an IOI answer


# 20% of the non-IOI documents narratives, 15% copying, 35% roll calls, 30% facts (the capitals are known well
# enough to steer between them)
OTHER_DOCUMENTS = [(0.2, narrative), (0.35, induction), (0.7, _roll_call_document), (1.0, fact)]


def training_document(rng: random.Random, p_ioi: float = 0.6, simple: bool = False,
                      third_name: float = 0.0) -> tuple[str, str]:
    """(prefix, rest): for IOI documents ``prefix`` is the prompt and ``rest`` starts with the answer token;
    for other documents ``prefix`` is the whole text and ``rest`` is empty (a roll call's rest starts at its first
    " again"). ``simple``: IOI documents without the optional parts; ``third_name``: see ``ioi_example``."""
    return corpus._document(rng, p_ioi, lambda r: ioi_example(r, simple=simple, third_name=third_name),
                            OTHER_DOCUMENTS)


def tokenizer_training_text(seed: int = 0, n: int = 20000, third_name: float = 0.0):
    """Text for training the BPE tokenizer: the corpus plus every name/place/object/country many times, so each
    becomes one token with a leading space (" Mary")."""
    return corpus._tokenizer_text(seed, n, lambda r: training_document(r, third_name=third_name), PLACES, OBJECTS)
