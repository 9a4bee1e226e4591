#!/usr/bin/env python3
"""Writes corpus.txt, dtrain's default training text: English-like prose from a small
deterministic grammar (a few hundred words, a dozen sentence shapes, short stories in
chapters). Nothing is downloaded and no existing text is copied; the same seed gives the
same bytes on any Python 3.

    python3 data/make_corpus.py            # writes data/corpus.txt (about 256 KB)
    python3 data/make_corpus.py --bytes N --seed S --out FILE
"""
import argparse
import os
import random

NAMES = ["Anna", "Ben", "Clara", "David", "Elena", "Felix", "Grace", "Hugo", "Iris", "Jonas",
         "Kira", "Leo", "Mara", "Nils", "Olga", "Paul", "Rosa", "Sam", "Tilde", "Victor"]
PLACES = ["the river", "the old mill", "the market", "the harbour", "the hill", "the forest",
          "the village", "the library", "the station", "the garden", "the bridge", "the school",
          "the kitchen", "the tower", "the valley", "the farm"]
NOUNS = [("dog", "dogs"), ("cat", "cats"), ("bird", "birds"), ("boat", "boats"),
         ("letter", "letters"), ("lamp", "lamps"), ("book", "books"), ("key", "keys"),
         ("horse", "horses"), ("apple", "apples"), ("stone", "stones"), ("window", "windows"),
         ("song", "songs"), ("map", "maps"), ("coat", "coats"), ("basket", "baskets"),
         ("child", "children"), ("friend", "friends"), ("teacher", "teachers"),
         ("farmer", "farmers"), ("sailor", "sailors"), ("baker", "bakers"), ("clock", "clocks"),
         ("candle", "candles"), ("road", "roads"), ("storm", "storms"), ("cup", "cups"),
         ("door", "doors"), ("tree", "trees"), ("fish", "fish"), ("story", "stories"),
         ("box", "boxes")]
ADJECTIVES = ["small", "large", "old", "young", "quiet", "loud", "bright", "dark", "warm",
              "cold", "green", "red", "blue", "heavy", "light", "strange", "happy", "tired",
              "clever", "gentle", "broken", "golden", "wet", "empty", "busy", "careful"]
# (base, third person, past)
VERBS = [("see", "sees", "saw"), ("find", "finds", "found"), ("carry", "carries", "carried"),
         ("open", "opens", "opened"), ("watch", "watches", "watched"), ("paint", "paints", "painted"),
         ("follow", "follows", "followed"), ("lose", "loses", "lost"), ("build", "builds", "built"),
         ("mend", "mends", "mended"), ("hide", "hides", "hid"), ("bring", "brings", "brought"),
         ("read", "reads", "read"), ("sell", "sells", "sold"), ("count", "counts", "counted"),
         ("clean", "cleans", "cleaned"), ("keep", "keeps", "kept"), ("draw", "draws", "drew")]
INTRANSITIVE = [("walk", "walks", "walked"), ("sleep", "sleeps", "slept"), ("sing", "sings", "sang"),
                ("wait", "waits", "waited"), ("run", "runs", "ran"), ("laugh", "laughs", "laughed"),
                ("rest", "rests", "rested"), ("work", "works", "worked"), ("swim", "swims", "swam")]
ADVERBS = ["slowly", "quickly", "quietly", "gladly", "carefully", "again", "at once", "together",
           "alone", "happily", "for a while", "without a word"]
PREPOSITIONS = ["near", "behind", "beside", "under", "across", "past", "inside", "above"]
TIMES = ["In the morning", "At noon", "In the evening", "That night", "The next day",
         "Long ago", "On Sunday", "After the rain", "Before dawn", "In winter", "In spring",
         "Every day"]
FEELINGS = ["glad", "sorry", "afraid", "sure", "surprised", "proud", "worried"]
SAY = ["said", "asked", "whispered", "called", "answered", "shouted"]
NUMBERS = ["two", "three", "four", "five", "six", "seven", "ten", "twelve"]


class Grammar:
    def __init__(self, rng):
        self.r = rng

    def pick(self, xs):
        return self.r.choice(xs)

    def noun_phrase(self, plural=None):
        plural = self.r.random() < 0.3 if plural is None else plural
        sing, plur = self.pick(NOUNS)
        noun = plur if plural else sing
        roll = self.r.random()
        if plural and roll < 0.25:
            det = self.pick(NUMBERS)
        elif plural:
            det = self.pick(["the", "some", "many", "the"])
        else:
            det = self.pick(["the", "a", "the", "this", "that"])
            if det == "a" and roll < 0.6:
                adj = self.pick(ADJECTIVES)
                det = "an" if adj[0] in "aeiou" else "a"
                return f"{det} {adj} {noun}"
            if det == "a" and noun[0] in "aeiou":
                det = "an"
        if self.r.random() < 0.35:
            return f"{det} {self.pick(ADJECTIVES)} {noun}"
        return f"{det} {noun}"

    def subject(self):
        if self.r.random() < 0.5:
            return self.pick(NAMES), False
        plural = self.r.random() < 0.3
        return self.noun_phrase(plural), plural

    def place_phrase(self):
        return f"{self.pick(PREPOSITIONS)} {self.pick(PLACES)}"

    def clause(self, tense):
        subj, plural = self.subject()
        if self.r.random() < 0.6:
            base, third, past = self.pick(VERBS)
            verb = past if tense == "past" else (base if plural else third)
            out = f"{subj} {verb} {self.noun_phrase()}"
        else:
            base, third, past = self.pick(INTRANSITIVE)
            verb = past if tense == "past" else (base if plural else third)
            out = f"{subj} {verb}"
        if self.r.random() < 0.4:
            out += f" {self.place_phrase()}"
        if self.r.random() < 0.25:
            out += f" {self.pick(ADVERBS)}"
        return out

    def sentence(self, tense):
        roll = self.r.random()
        if roll < 0.30:
            s = self.clause(tense)
        elif roll < 0.45:
            s = f"{self.pick(TIMES)}, {lower_first(self.clause(tense))}"
        elif roll < 0.60:
            s = f"{self.clause(tense)}, {self.pick(['and', 'but', 'so', 'while'])} {lower_first(self.clause(tense))}"
        elif roll < 0.70:
            name = self.pick(NAMES)
            was = "was" if tense == "past" else "is"
            s = f"{name} {was} {self.pick(FEELINGS)} because {lower_first(self.clause(tense))}"
        elif roll < 0.85:
            speaker = self.pick(NAMES)
            words = self.clause("present")
            if self.r.random() < 0.4:
                q = self.pick(["Where is", "Who has", "Why did we lose", "Can you see"])
                return f"\"{q} {self.noun_phrase(False)}?\" {self.pick(SAY)} {speaker}."
            return f"\"{capital(words)}.\" {self.pick(SAY)} {speaker}."
        else:
            n = self.pick(NUMBERS)
            sing, plur = self.pick(NOUNS)
            there = "There were" if tense == "past" else "There are"
            s = f"{there} {n} {plur} {self.place_phrase()}"
        return capital(s) + "."

    def paragraph(self):
        tense = "past" if self.r.random() < 0.7 else "present"
        return " ".join(self.sentence(tense) for _ in range(self.r.randint(3, 7)))


def capital(s):
    return s[0].upper() + s[1:]


def lower_first(s):
    return s if s.split(" ")[0] in NAMES else s[0].lower() + s[1:]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bytes", type=int, default=256 * 1024, help="stop after this many bytes")
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus.txt"))
    args = ap.parse_args()
    g = Grammar(random.Random(args.seed))
    parts, size, chapter = [], 0, 0
    while size < args.bytes:
        chapter += 1
        text = f"Chapter {chapter}\n\n" + "\n\n".join(g.paragraph() for _ in range(g.r.randint(4, 9))) + "\n\n"
        parts.append(text)
        size += len(text)
    with open(args.out, "w", encoding="ascii", newline="\n") as f:
        f.write("".join(parts))
    print(f"wrote {args.out}: {size} bytes, {chapter} chapters (seed {args.seed})")


if __name__ == "__main__":
    main()
