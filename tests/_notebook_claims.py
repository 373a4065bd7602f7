"""Every sentence of the notebooks' prose that states a number or names a role, and what shows it.

The prose is the markdown and the comments of the answer cells, in notebooks/sources/. A sentence is listed here when
it holds a decimal number, a percentage, a share ("a third", "half", "most of", "almost nothing", "exactly", "twice",
"near-certain") or a role name (name mover, S-inhibition, duplicate-token, induction, positional or backup head).
Each is listed by a quote from it, with either

- a pattern that the notebook's solved copy must print (tests/test_notebooks.py's solved run checks it): the number
  or role the sentence relies on, as a cell prints it, never a number typed here; or
- one of the reasons below why the sentence states nothing measured on this model.

tests/test_notebooks.py fails on a listed sentence the notebook no longer prints evidence for, on a quote no longer
in the prose, and on a sentence with a number or a role that is not listed.
"""

import re

QUESTION = "not a claim: a question or a prediction asked of the student"
METHOD = "not a measurement: it says what a method or a definition does"
PAPER = "GPT-2 small, as Wang et al. 2022 report it (cited), not a number of this model"
MATH = "holds by construction (the cell's own arithmetic), and its check prints it is right"

FLAGGED = re.compile(r"\b\d+\.\d+\b|\d+\s?%|\b(a third|a quarter|half|twice|exactly|near-certain|almost nothing|"
                     r"most of)\b|name.mover|S-inhibition|duplicate-token|induction head|positional head|backup",
                     re.I)

NUM = r"[+-]?\d+\.\d+"
HEAD = r"L\d+H\d+"

CLAIMS = {
    "00_primer": [
        ("solves it with **a circuit of its own**", METHOD),  # shown by 01-04, compared with the paper in 04
        ("will the sum match the final stream exactly", QUESTION),
        ("Exactly, up to float rounding (printed)", r"right: the final stream is the sum of \d+ terms \(largest "
                                                    r"difference [\d.e+-]+, rounding\)"),
        ("replaces exactly this vector", METHOD),
    ],
    "01_ioi_patching": [
        ("Most of this notebook denoises", METHOD),
        ("it restores everything (1.00)", r"resid_pre 0: positions with \|value\| > 0\.05: \{\"\d+:' \w+'\": 1\.0\}"),
        ("Which name would the end lean to after layer 0", QUESTION),
        ("A layer-0 head at END does not help", rf"layer-0 heads at END: +\{{('{HEAD}': -{NUM}(, )?)+\}}"),
        ("after layer 0 the end already leans to the name seen twice",
         rf"the end after layer 0 \(logit lens\): top ' John', p\(' John'\) = {NUM}: the subject"),
        ("are called the **S2 heads** and the **END heads**",
         rf"S2 heads \(>= 0\.15 at S2\): \['{HEAD}'.*\| END heads \(>= 0\.15 at END\): \['{HEAD}'"),
        ("GPT-2 small has **duplicate-token heads**", PAPER),
        ("A duplicate-token head follows the copy of its name there", METHOD),
        ("The END heads look at S2, where the repeated name stands: most of their attention",
         rf"{HEAD} +END +{NUM} +{NUM} +{NUM} +(0\.[5-9]\d|1\.00)"),
        ("but less than half of it (printed)", rf"{HEAD} +S2 +{NUM} +{NUM} +{NUM} +0\.[0-4]\d"),
        ("as a duplicate-token head would", rf"from S2, > 0\.4 on S1 in our prompt: \['{HEAD}'"),
        ("the mean of the two orders, printed", rf"on S1, the mean of the two orders: \{{'{HEAD}': {NUM}"),
        ("The S2 heads write almost nothing directly", rf"{HEAD}: direct on the logit diff {NUM} \|"),
        ("The END heads write most of the logit difference",
         rf"largest parts at END: \[\('{HEAD}', {NUM}\).*\s+sum of the parts {NUM} = the logit diff {NUM}"),
        ("Wang et al.'s duplicate-token, S-inhibition and name-mover heads", PAPER),
        ("Sufficiency is half the test", METHOD),
        ("Mean-ablating everything outside the circuit keeps most of the behaviour",
         rf"mean-ablating all but the circuit +logit diff {NUM}"),
    ],
    "02_steering": [
        ("plus exactly `1 * v`", QUESTION),
        ("the template's share of each activation is the same for both countries",
         rf"\|Spain's activation \+ v - France's activation\| = {NUM}, against \|v\| = {NUM}"),
        ("will alpha 6 make ' Paris' *more* likely", QUESTION),
        ("For Spain the subtraction cancelled exactly", rf"France's activation patched in: \[\(' Paris', {NUM}\)"),
        ("also moves a third thing", METHOD),
    ],
    "03_logit_lens": [
        ("and when near-certain?", QUESTION),
        ("After layer 0 the end predicts ' John', the repeated name",
         rf"after layer 0 the end predicts ' John' \(p = {NUM}\)"),
        ("the later layers make it near-certain", r"p\(' Mary'\) at the end: (0\.9\d\d|1\.000)"),
        ("GPT-2's name movers instead attend to the IO itself", PAPER),
    ],
    "04_circuit": [
        ("the paper's role names (name movers, S-inhibition heads)", METHOD),
        ("asks exactly that, for one **sender**", METHOD),
        ("A first-layer head at END does not help", rf"first-layer heads at END: +\{{('{HEAD}': -?{NUM}(, )?)+\}}"),
        ("split by position each of the later ones looks mostly at ONE intro slot",
         rf"the same heads, by intro position \(first name / second name\): \{{.*'L[1-9]H\d': \({NUM}, {NUM}\)"),
        ("**Direct logit attribution** splits", METHOD),
        ("Wang et al. found GPT-2's **name movers**", PAPER),
        ("Are they name movers?", QUESTION),
        ("Not yet shown: a name mover copies the name it reads", METHOD),
        ("Wang et al. call a head a *name mover*", PAPER),
        ("The share of names for which it does is the head's **copying score**", METHOD),
        ("By the paper's evidence these are not name movers",
         rf"END heads writing the name they read, negated: \['{HEAD}'"),
        ("In GPT-2 small the **S-inhibition heads** were found this way", PAPER),
        ("Nothing of note reaches the queries from an earlier head",
         r"largest \|path\| into the queries, keys, values: \{'q': 0\.0\d+"),
        ("as GPT-2's S-inhibition heads steer the name movers", PAPER),
        ("a click on an edge patches exactly that edge", METHOD),
        ("Through the MLP the small circuit keeps most of the logit difference",
         rf"heads only +\d+ of \d+ edges: faithfulness {NUM}\s+through MLP0 +\d+ of \d+ edges: faithfulness 0\.9\d"),
        ("`qk_fix` computes the attention pattern exactly", METHOD),
        ("puts the heads restoring at least 0.15 next to what path patching found", METHOD),
        ("in the right order and each a little low", rf"later heads that matter, \(estimate, exact\): \{{'{HEAD}': "
                                                      rf"\({NUM}, {NUM}\)"),
        ("by about half or more (printed above)", rf"S2 heads' output, exact: \{{'{HEAD}': {NUM}\}} \| estimate: "),
        ("The card calls the END heads neither name movers nor S-inhibition heads",
         r"the card on 'not name movers': \['.*not name movers"),
        ("The card finds no duplicate-token head", r"the card on 'by position': \['.*by position"),
        ("The S2 heads carry the difference", rf"card, output at S2: +\{{'{HEAD}': {NUM}"),
        ("its output patched at S2 alone restores most of the",
         rf"MLP0's output patched at S2 alone restores (0\.[5-9]\d|1\.\d\d); at END {NUM}"),
        ("S2 replaced by a third name", METHOD),
        ("Wang et al.'s roles in GPT-2 small are defined by the evidence", PAPER),
        ("name the paper's name movers?", QUESTION),
        ("the paper's S-inhibition heads?", QUESTION),
    ],
    "05_features": [
        ("the model's own logits exactly, or close?", QUESTION),
        ("(a) Exactly the model's logits (up to float rounding)",
         r"\(a\) splice with nothing edited: largest logit difference from the model's own [\d.e+-]+"),
        ("by how much of it: a tenth, a third, all of it?", QUESTION),
        ("zeroing it alone removes the share", rf"feature \d+: drop {NUM} \(\d+% of the logit diff\); the runner-up, "
                                               rf"feature \d+: {NUM}"),
        ("the sweep's cell is the hand-made ilab.zero run",
         r"the sweep's cell: logit diff ([+-]\d+\.\d+); ilab\.zero run by hand: \1"),
        ("Its attribution estimate misses it too", r"ranks \d+ of \d+ by patching's attribution, \d\d+ by the "
                                                   r"ablation's attribution estimate, 1 by the exact ablation sweep"),
        ("More than one token in ten (printed)", r"fires on (1\d|[2-9]\d)\.\d% of tokens, density rank [1-3] of \d+"),
        ("in its two weakest bands most examples are other",
         r"of the two weakest bands' examples, \d+ of \d+"),
        ("in more than half of them", r"feature \d+: fires at S2 in \d+% of pairs"),
        ("With twice that (the feature pushed below 0)?", QUESTION),
        ("-1 x the activation is the ablation exactly", rf"steered at S2 by alpha = -1 x {NUM}: logit diff {NUM}"),
        ("Twice that lowers the logit difference further", rf"steered at S2 by alpha = -2 x {NUM}: logit diff {NUM}"),
    ],
    "06_circuits": [
        ("will the replacement give the model's logits exactly, or only close?", QUESTION),
        ("(a) Exactly, up to float rounding (printed)",
         r"\(a\) with error terms: largest logit difference from the model's own [\d.e+-]+"),
        ("(b) Yes, Mary still wins (printed)",
         r"\(b\) transcoders alone: top token ' Mary' p = [\d.]+ \(the model: ' Mary'"),
        ("Will the replacement score be closer to 0.5 or to 1?", QUESTION),
        ("One: the model gives Mary more than the 95 percent", r"logit nodes: \[\(' Mary', 0\.9[5-9]\d*\)\]"),
        ("The replacement score is close to 1 (printed)", r"replacement score 0\.[89]\d\d, completeness 0\.9\d\d"),
        ("The single most influential feature is an early one at S2 (printed)",
         r"the most influential feature: layer 0, feature \d+ at position \d+ \(' John'\)"),
        ("the rest of the top sits mostly at END, in the first and last layers",
         r"of the top 10, [5-9] at END, in layers \[0, 3\]"),
        ("None: the residual stream keeps each position's own content", rf"edge {NUM} = residual [+-]0\.00 "),
        ("heads of the layers after the feature that attend from END to S2",
         rf"{HEAD}: carries {NUM}; its attention from END to S2 (0\.[5-9]\d|1\.00)"),
        ("The last-layer feature: the right sign and size, a little smaller than predicted",
         rf"last-layer feature at END \(L3 F\d+\): real {NUM}, predicted direct {NUM}"),
        ("the live norm recomputes its scale once the feature is gone",
         rf"through the live ln_f by hand: {NUM} \(the run: {NUM}\); with its scale frozen: {NUM} "
         rf"\(the graph: {NUM}\)"),
        ("The layer-0 feature at S2 misses", rf"layer-0 feature at S2 \(L0 F\d+\): real {NUM}, predicted direct {NUM}"),
        ("The norms.", rf"patterns and later MLPs frozen \(only the norms live\): {NUM}"),
        ("it the scale the next norm divides by there changes (printed)",
         rf"the scale of the residual stream at S2 entering layer 1: {NUM} with the feature, {NUM} without"),
    ],
}


def prose_sentences(cells) -> list[str]:
    """The sentences of a notebook's prose: its markdown, and the comments of its answer cells."""
    parts = []
    for cell in cells:
        if cell.cell_type == "markdown":
            parts.append(cell.source)
        elif cell.source.startswith("# ANSWER"):
            parts.append("\n".join(line[2:] for line in cell.source.splitlines()[1:] if line.startswith("# ")))
    text = re.sub(r"\s+", " ", "\n".join(parts))
    return re.split(r"(?<=[.!?])\s+(?=[A-Z(*#-])", text)
